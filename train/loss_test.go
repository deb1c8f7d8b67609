package train

import (
	"context"
	"testing"
)

func TestLossFalls(t *testing.T) {
	dir := tinyModel(t)
	for _, tc := range []struct {
		name string
		edit func(c *Config)
	}{
		{"block", func(c *Config) {}},
		{"block-ckpt-ar-weight", func(c *Config) { c.CheckpointLayers = true; c.ARLossWeight = 0.5 }},
		{"block-confidence", func(c *Config) { c.ConfidenceLossWeight = 0.3 }},
		{"ar", func(c *Config) { c.Objective = ObjectiveAR }},
		{"mdm", func(c *Config) { c.Objective = ObjectiveMDM }},
		{"mdm-anneal", func(c *Config) { c.Objective = ObjectiveMDM; c.AnnealSteps = 20; c.Shift = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(dir, t.TempDir())
			tc.edit(&c)
			res, err := Run(context.Background(), c, Options{Train: toySource(t, 16, 32)})
			if err != nil {
				t.Fatal(err)
			}
			first, last := mean(res.Losses[:5]), mean(res.Losses[len(res.Losses)-5:])
			t.Logf("loss %.3f -> %.3f", first, last)
			if !(last < 0.5*first) {
				t.Fatalf("loss did not fall: first steps %.3f, last steps %.3f (%v)", first, last, res.Losses)
			}
		})
	}
}
