// Command dllm turns autoregressive Llama-family checkpoints into text
// diffusion models, trains them with libtorch and serves them over an
// OpenAI-compatible API.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

// version is set at link time by the Makefile (-X main.version=...).
var version = "dev"

func main() {
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
	if err := app.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "dllm:", err)
		os.Exit(1)
	}
}
