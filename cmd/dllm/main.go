// Command dllm turns autoregressive Llama-family checkpoints into text
// diffusion models, trains them with libtorch and serves them over an
// OpenAI-compatible API.
package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/urfave/cli/v3"
)

// version is set at link time by the Makefile (-X main.version=...).
var version = "dev"

func main() {
	if err := rootCommand().Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "dllm:", err)
		os.Exit(1)
	}
}

// rootCommand is dllm with every subcommand, their help's defaults
// normalised (normalizeDefaults).
func rootCommand() *cli.Command {
	app := &cli.Command{
		Name:    "dllm",
		Usage:   "convert, train and serve block-diffusion language models",
		Version: version,
		Commands: []*cli.Command{
			versionCommand(),
			convertCommand(),
			inspectCommand(),
			logitsCommand(),
			benchCommand(),
			tokenizeCommand(),
			generateCommand(),
			serveCommand(),
			trainCommand(),
			exportCommand(),
			dataCommand(),
			evalCommand(),
		},
	}
	normalizeDefaults(app)
	return app
}

// normalizeDefaults makes every flag's help show its default once: a flag
// whose usage states its default in words ("(default: dllm.json's)") does
// not also get urfave's "(default: 0)", and a boolean flag that is on by
// default says so (urfave shows no default for booleans).
func normalizeDefaults(c *cli.Command) {
	for _, f := range c.Flags {
		usage := ""
		if d, ok := f.(cli.DocGenerationFlag); ok {
			usage = d.GetUsage()
		}
		base := reflect.ValueOf(f).Elem()
		switch b, isBool := f.(*cli.BoolFlag); {
		case strings.Contains(usage, "(default:"):
			base.FieldByName("HideDefault").SetBool(true)
		case isBool && b.Value && b.DefaultText == "":
			b.DefaultText = "true"
		}
	}
	for _, sub := range c.Commands {
		normalizeDefaults(sub)
	}
}
