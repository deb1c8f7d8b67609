package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotFile is the picture of a run's metrics beside metrics.jsonl,
// redrawn at every eval and at the end.
const PlotFile = "metrics.png"

// readMetrics reads metrics.jsonl in step order; a step written twice (a
// resumed run repeats the steps after its checkpoint) keeps its last line.
func readMetrics(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byStep := map[int]int{}
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue // a line cut by a crash
		}
		if i, ok := byStep[r.Step]; ok {
			recs[i] = r
			continue
		}
		byStep[r.Step] = len(recs)
		recs = append(recs, r)
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return a.Step - b.Step })
	return recs, sc.Err()
}

// writePlot draws the run's train and eval loss, learning rate, gradient
// norm and tokens/s against the step, one panel each, into out/PlotFile
// (through a temporary file: a viewer never sees half a picture).
func writePlot(out string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	panels := []struct {
		title string
		lines []line
	}{
		{"loss", []line{
			{"train", func(r Record) (float64, bool) { return r.Loss, true }},
			{"eval", func(r Record) (float64, bool) {
				if r.EvalLoss == nil {
					return 0, false
				}
				return *r.EvalLoss, true
			}},
		}},
		{"learning rate", []line{{"", func(r Record) (float64, bool) { return r.LR, true }}}},
		{"gradient norm (before clipping)", []line{{"", func(r Record) (float64, bool) { return r.GradNorm, true }}}},
		{"tokens/s", []line{{"", func(r Record) (float64, bool) { return r.TokPerSec, true }}}},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		pl := plot.New()
		pl.Title.Text = p.title
		pl.X.Label.Text = "step"
		pl.Add(plotter.NewGrid())
		for k, l := range p.lines {
			pts := l.points(recs)
			if len(pts) == 0 {
				continue
			}
			ln, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			ln.Color, sc.Color = plotColors[k], plotColors[k]
			sc.Radius = vg.Points(1.5)
			if len(pts) > 60 {
				sc.Radius = 0 // a dense line needs no marks
			}
			pl.Add(ln, sc)
			if l.name != "" {
				pl.Legend.Add(l.name, ln)
			}
		}
		pl.Legend.Top = true
		plots[i] = []*plot.Plot{pl}
	}
	const w, h = 8 * vg.Inch, 11 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	tmp, err := os.CreateTemp(out, PlotFile+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { // CreateTemp makes 0600
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(out, PlotFile))
}

// line is one series of a panel: a value of some records.
type line struct {
	name  string
	value func(Record) (float64, bool)
}

func (l line) points(recs []Record) plotter.XYs {
	var pts plotter.XYs
	for _, r := range recs {
		if v, ok := l.value(r); ok {
			pts = append(pts, plotter.XY{X: float64(r.Step), Y: v})
		}
	}
	return pts
}

// plotColors are the series' colours: train (blue), then eval (orange).
var plotColors = []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255}}

// replot redraws the picture from metrics.jsonl; a failure is a warning,
// never the end of a run.
func (t *trainer) replot() {
	if t.metrics == nil {
		return
	}
	recs, err := readMetrics(filepath.Join(t.cfg.Out, "metrics.jsonl"))
	if err == nil {
		err = writePlot(t.cfg.Out, recs)
	}
	if err != nil {
		t.warn(fmt.Sprintf("plot: %v", err))
	}
}
