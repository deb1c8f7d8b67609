package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// Every flag's help shows its default once, and a default stated in words
// belongs to a flag whose own value is unset (else the words and the real
// default could disagree); a boolean that is on says so.
func TestFlagDefaults(t *testing.T) {
	var walk func(path string, c *cli.Command)
	walk = func(path string, c *cli.Command) {
		for _, f := range c.Flags {
			help := fmt.Sprint(f)
			name := path + " --" + f.Names()[0]
			if n := strings.Count(help, "(default:"); n > 1 {
				t.Errorf("%s shows %d defaults: %s", name, n, help)
			}
			d, ok := f.(cli.DocGenerationFlag)
			if !ok {
				continue
			}
			if strings.Contains(d.GetUsage(), "(default:") {
				if v := reflect.ValueOf(f).Elem().FieldByName("Value"); v.IsValid() && !v.IsZero() {
					t.Errorf("%s states its default in words but its value is %v: %s", name, v, help)
				}
			}
			if b, ok := f.(*cli.BoolFlag); ok && b.Value && !strings.Contains(help, "(default: true)") {
				t.Errorf("%s is on by default but does not say so: %s", name, help)
			}
		}
		for _, sub := range c.Commands {
			walk(path+" "+sub.Name, sub)
		}
	}
	walk("dllm", rootCommand())
}
