package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"dllm/model"
	"dllm/torch"
)

func logitsCommand() *cli.Command {
	return &cli.Command{
		Name:  "logits",
		Usage: "print the logits of a forward pass over token ids, to check parity with other implementations",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "model directory (config.json + safetensors)"},
			&cli.StringFlag{Name: "ids", Required: true, Usage: "comma-separated token ids, e.g. 0,5,7"},
			&cli.StringFlag{Name: "attention", Value: "causal", Usage: "causal, bidirectional or block:N"},
			&cli.StringFlag{Name: "dtype", Value: "f32", Usage: "compute dtype: f32, bf16 or f16"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu, cuda or cuda:N (auto picks the GPU if any)"},
			&cli.BoolFlag{Name: "json", Usage: `print {"logits":[[...],...]} (the default prints argmax per row)`},
		},
		Action: func(ctx context.Context, c *cli.Command) (err error) {
			ids, err := parseIDs(c.String("ids"))
			if err != nil {
				return err
			}
			att, err := model.ParseAttention(c.String("attention"))
			if err != nil {
				return err
			}
			dev, dt, err := placement(c.String("device"), c.String("dtype"))
			if err != nil {
				return err
			}
			m, err := model.Load(c.String("model"), model.LoadOptions{Device: dev, DType: dt})
			if err != nil {
				return err
			}
			defer m.Free()
			for _, id := range ids {
				if id >= int64(m.Config.VocabSize) {
					return fmt.Errorf("token id %d is outside the vocabulary of %d", id, m.Config.VocabSize)
				}
			}
			defer torch.Recover(&err)
			var logits *torch.Tensor
			torch.NoGrad(func() {
				ts := torch.FromSlice(ids, 1, int64(len(ids))).To(torch.Int64, dev)
				logits, err = m.Forward(ts, model.ForwardOpts{Attention: att})
			})
			if err != nil {
				return err
			}
			V := logits.Size(-1)
			flat := logits.Float32s()
			w := c.Root().Writer
			if !c.Bool("json") {
				for i := range ids {
					row := flat[int64(i)*V : int64(i+1)*V]
					best := 0
					for j, v := range row {
						if v > row[best] {
							best = j
						}
					}
					fmt.Fprintf(w, "%d\t%d\t%.6g\n", ids[i], best, row[best])
				}
				return nil
			}
			out := struct {
				Logits [][]float32 `json:"logits"`
			}{}
			for i := range ids {
				out.Logits = append(out.Logits, flat[int64(i)*V:int64(i+1)*V])
			}
			return json.NewEncoder(w).Encode(out)
		},
	}
}

// parseIDs reads "1,2,3" (spaces allowed) into non-negative token ids.
func parseIDs(s string) ([]int64, error) {
	var ids []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("bad token id %q in --ids", f)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--ids holds no token ids")
	}
	return ids, nil
}
