package train

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// metrics.jsonl is read in step order with a repeated step's last line (a
// resumed run repeats the steps after its checkpoint), past a line a crash
// cut; the picture is a PNG.
func TestReadMetricsAndPlot(t *testing.T) {
	dir := t.TempDir()
	lines := `{"step":1,"loss":5,"lr":0.001,"grad_norm":2,"tok_s":100}
{"step":2,"loss":4.5,"lr":0.001,"grad_norm":2,"tok_s":100,"eval_loss":4.9}
{"step":3,"loss":9,"lr":0.001,"grad_norm":2,"tok_s":100}
{"step":2,"loss":4.4,"lr":0.001,"grad_norm":2,"tok_s":90,"eval_loss":4.8}
{"step":3,"loss":4.2,"lr":0.0009,"grad_norm":1.5,"tok_s":95}
{"step":4,"lo`
	path := filepath.Join(dir, "metrics.jsonl")
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := readMetrics(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[1].Step != 2 || recs[1].Loss != 4.4 || *recs[1].EvalLoss != 4.8 || recs[2].Loss != 4.2 {
		t.Fatalf("records %+v", recs)
	}
	if err := writePlot(dir, recs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, PlotFile))
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("%s: %v", PlotFile, err)
	}
	if info, _ := os.Stat(filepath.Join(dir, PlotFile)); info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", info.Mode().Perm())
	}
}
