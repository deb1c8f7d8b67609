package train

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"dllm/model"
)

// Record is one line of metrics.jsonl, written after every optimizer step.
type Record struct {
	Step      int     `json:"step"`
	Loss      float64 `json:"loss"`
	ARLoss    float64 `json:"ar_loss,omitempty"` // the ar_loss_weight part of Loss
	LR        float64 `json:"lr"`
	BlockSize int     `json:"block_size"`
	Tokens    int64   `json:"tokens"`
	TokPerSec float64 `json:"tok_s"`
	// MFU is model FLOPs per second over peak_tflops; null on the CPU.
	MFU      *float64 `json:"mfu"`
	GradNorm float64  `json:"grad_norm"`
	// DistillLoss is the distill.weight part of Loss: weight * T^2 * the
	// mean KL(teacher || student) over the step's targets.
	DistillLoss float64 `json:"distill_loss,omitempty"`
	// ConfidenceLoss is the confidence_loss_weight part of Loss.
	ConfidenceLoss float64 `json:"confidence_loss,omitempty"`
	// EvalLoss is set on steps that ran the eval.
	EvalLoss *float64 `json:"eval_loss,omitempty"`
	Time     string   `json:"time"`
}

// metricsLog appends Records to out/metrics.jsonl. A resumed run appends
// too: lines of steps after the checkpoint, from the interrupted run, stay
// in the file and the later lines of the same step supersede them.
type metricsLog struct{ f *os.File }

func openMetrics(path string) (*metricsLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: metrics: %w", err)
	}
	return &metricsLog{f}, nil
}

func (m *metricsLog) write(r Record) error {
	b, _ := json.Marshal(r)
	if _, err := m.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("train: metrics: %w", err)
	}
	return nil
}

func (m *metricsLog) close() error { return m.f.Close() }

// flopsModel counts the model FLOPs of a micro-batch, forward and backward
// (3x the forward), leaving out the recomputation of checkpointed layers
// (MFU, not hardware utilisation): 2 per weight per token row for the
// layers' matmuls, the head on the gathered rows only, and attention as
// the dense T x T score and value products that SDPA computes under an
// explicit mask.
type flopsModel struct {
	layerParams float64 // weights of all decoder layers
	headParams  float64 // vocab x hidden
	attnPerRow  float64 // layers x heads x head_dim
}

func newFlopsModel(cfg *model.Config) flopsModel {
	var layer float64
	for _, s := range model.ExpectedTensors(cfg) {
		if strings.HasPrefix(s.Name, "model.layers.") {
			n := 1.0
			for _, d := range s.Shape {
				n *= float64(d)
			}
			layer += n
		}
	}
	return flopsModel{
		layerParams: layer,
		headParams:  float64(cfg.VocabSize) * float64(cfg.HiddenSize),
		attnPerRow:  float64(cfg.NumHiddenLayers) * float64(cfg.NumAttentionHeads) * float64(cfg.HeadDim),
	}
}

// of is the training FLOPs of one micro-batch.
func (f flopsModel) of(mb *microBatch) float64 {
	rows := float64(mb.B) * float64(mb.T)
	heads := float64(len(mb.diff.rows) + len(mb.ar.rows))
	T := float64(mb.T)
	fwd := 2*f.layerParams*rows + 2*f.headParams*heads + 4*f.attnPerRow*rows*T
	return 3 * fwd
}

// reporter shows progress: a bar on a terminal, a line every logEvery
// steps otherwise; messages go above the bar.
type reporter struct {
	w        io.Writer
	bar      *progressbar.ProgressBar
	logEvery int
	total    int
	start    time.Time
	from     int // first step of this run (resume)
}

func newReporter(w io.Writer, terminal bool, logEvery, from, total int) *reporter {
	if w == nil {
		w = io.Discard
	}
	r := &reporter{w: w, logEvery: logEvery, total: total, start: time.Now(), from: from}
	if terminal {
		r.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(20),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetDescription("train"),
		)
		r.bar.Set(from)
	}
	return r
}

// printf writes a message line.
func (r *reporter) printf(format string, args ...any) {
	if r.bar != nil {
		r.bar.Clear()
	}
	fmt.Fprintf(r.w, "train: "+format+"\n", args...)
	if r.bar != nil {
		r.bar.RenderBlank()
	}
}

// step shows one step's record.
func (r *reporter) step(rec Record) {
	mfu := "n/a"
	if rec.MFU != nil {
		mfu = fmt.Sprintf("%.1f%%", 100**rec.MFU)
	}
	loss := fmt.Sprintf("loss %.4f", rec.Loss)
	if rec.DistillLoss != 0 {
		loss += fmt.Sprintf(" (distill %.4f)", rec.DistillLoss)
	}
	if rec.ConfidenceLoss != 0 {
		loss += fmt.Sprintf(" (confidence %.4f)", rec.ConfidenceLoss)
	}
	if r.bar != nil {
		r.bar.Describe(fmt.Sprintf("%s lr %.2e bs %d %s tok/s mfu %s", loss, rec.LR, rec.BlockSize, siCount(rec.TokPerSec), mfu))
		r.bar.Set(rec.Step)
		return
	}
	if r.logEvery == 0 || (rec.Step%r.logEvery != 0 && rec.Step != r.total) {
		return
	}
	eta := "?"
	if done := rec.Step - r.from; done > 0 {
		left := time.Duration(float64(time.Since(r.start)) / float64(done) * float64(r.total-rec.Step))
		eta = left.Round(time.Second).String()
	}
	fmt.Fprintf(r.w, "train: step %d/%d %s lr %.2e bs %d gnorm %.3f tokens %s %s tok/s mfu %s eta %s\n",
		rec.Step, r.total, loss, rec.LR, rec.BlockSize, rec.GradNorm, siCount(float64(rec.Tokens)), siCount(rec.TokPerSec), mfu, eta)
}

func (r *reporter) finish() {
	if r.bar != nil {
		r.bar.Finish()
		fmt.Fprintln(r.w)
	}
}

// siCount prints 12345 as 12.3k.
func siCount(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
