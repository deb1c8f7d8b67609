package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"dllm/diffusion"
	"dllm/torch"
)

// Data parallelism (docs/distributed.md). World processes, one per device,
// train one model. Every rank draws every step's whole global batch, data
// and noise, from the same generators, exactly as one process would, and
// runs the forward and backward of its own contiguous share of the
// micro-batches; the gradients are summed over the ranks (the loss is
// normalised by the global batch's targets, so the sum is the gradient of
// the global loss) before clipping, and every rank then takes the same
// AdamW step. So the maths, the data order and the checkpoints do not
// depend on the number of ranks: a run resumes on any N that divides
// grad_accum. Rank 0 alone reads and writes checkpoints, metrics and
// exports; the others receive its start state and weights.

// DefaultDistTimeout bounds the rendezvous and every collective: long
// enough for rank 0 to write a checkpoint or a sample while the others
// wait in the next step's all-reduce.
const DefaultDistTimeout = 30 * time.Minute

// Dist is this process's place in a data-parallel job.
type Dist struct {
	// Rank is this process's rank among World.
	Rank, World int
	// LocalRank is its rank among the processes of its machine: the GPU it
	// uses, cuda:LocalRank.
	LocalRank int
	// Addr and Port are the rendezvous store's (MASTER_ADDR, MASTER_PORT),
	// hosted by rank 0 unless AgentStore.
	Addr string
	Port int
	// AgentStore says that a launcher hosts the store (torchrun's agent);
	// this process's keys then go under Prefix.
	AgentStore bool
	Prefix     string
	// Timeout bounds the rendezvous and every collective (0: the default).
	Timeout time.Duration
	// ExitAfterStep > 0 makes this rank exit with status 3 after that
	// step, as a crashed rank would (fault injection for the launcher's
	// tests: DLLM_FAULT_EXIT=RANK:STEP in builds with -tags dllm_fault).
	ExitAfterStep int
}

// DistFromEnv reads torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT (and TORCHELASTIC_USE_AGENT_STORE with
// TORCHELASTIC_RESTART_COUNT, as torch.distributed does), plus, in test
// builds, DLLM_FAULT_EXIT. It is nil, with no error, when WORLD_SIZE is unset or 1:
// the process trains alone.
func DistFromEnv(timeout time.Duration) (*Dist, error) {
	ws := os.Getenv("WORLD_SIZE")
	if ws == "" || ws == "1" {
		return nil, nil
	}
	var errs []string
	num := func(name, def string) int {
		v := os.Getenv(name)
		if v == "" {
			v = def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("%s=%q", name, v))
		}
		return n
	}
	d := &Dist{World: num("WORLD_SIZE", ""), Rank: num("RANK", ""), Addr: os.Getenv("MASTER_ADDR"),
		Port: num("MASTER_PORT", ""), Timeout: timeout}
	d.LocalRank = num("LOCAL_RANK", strconv.Itoa(d.Rank))
	if d.Addr == "" {
		errs = append(errs, "MASTER_ADDR unset")
	}
	if os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "True" {
		d.AgentStore = true
		d.Prefix = fmt.Sprintf("/worker/attempt_%d", num("TORCHELASTIC_RESTART_COUNT", "0"))
	}
	if step, err := faultExit(d.Rank); err != nil {
		errs = append(errs, err.Error())
	} else {
		d.ExitAfterStep = step
	}
	if len(errs) == 0 && (d.World < 1 || d.Rank >= d.World) {
		errs = append(errs, fmt.Sprintf("RANK %d of WORLD_SIZE %d", d.Rank, d.World))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("train: data-parallel environment: %s", strings.Join(errs, ", "))
	}
	return d, nil
}

// leads reports whether this process is rank 0 (or alone): the one that
// reads and writes checkpoints, metrics and exports.
func (t *trainer) leads() bool { return t.group == nil || t.group.Rank() == 0 }

// join puts the trainer on its rank's device (cuda:LOCAL_RANK for cuda or
// auto on a GPU machine) and joins the process group: NCCL on GPUs, Gloo
// on the CPU.
func (t *trainer) join() error {
	d := t.o.Dist
	if d == nil {
		return nil
	}
	switch s := t.cfg.Device; {
	case strings.HasPrefix(s, "cuda:"):
		return fmt.Errorf("train: device %s with %d ranks: give cuda or auto, each rank uses cuda:LOCAL_RANK (choose GPUs with CUDA_VISIBLE_DEVICES)", s, d.World)
	case t.dev.CUDA:
		var err error
		if t.dev, err = resolveDevice(fmt.Sprintf("cuda:%d", d.LocalRank)); err != nil {
			return err
		}
	}
	if t.cfg.GradAccum%d.World != 0 {
		return fmt.Errorf("train: grad_accum %d is not a multiple of the %d ranks: every step's %d micro-batches of %d sequences (the global batch) are shared out evenly; make grad_accum a multiple of %d",
			t.cfg.GradAccum, d.World, t.cfg.GradAccum, t.cfg.MicroBatch, d.World)
	}
	backend := torch.Gloo
	if t.dev.CUDA {
		backend = torch.NCCL
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDistTimeout
	}
	g, err := torch.NewGroup(torch.GroupOptions{Backend: backend, Addr: d.Addr, Port: d.Port, HostStore: d.Rank == 0 && !d.AgentStore,
		Prefix: d.Prefix, Rank: d.Rank, World: d.World, Device: t.dev, Timeout: timeout})
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	t.group = g
	if d.Rank != 0 {
		t.o.Log = nil // rank 0 reports; the others speak only through their errors
	}
	t.logf("data parallel: %d ranks (%s) share each step's %d x %d sequences, %d micro-batch(es) each",
		d.World, backend, t.cfg.GradAccum, t.cfg.MicroBatch, t.cfg.GradAccum/d.World)
	return nil
}

// startState is what rank 0 decides at start and the others follow.
type startState struct {
	Err         string `json:"err,omitempty"` // rank 0 failed to start
	Resuming    bool   `json:"resuming"`
	State       State  `json:"state"`
	ModelConfig []byte `json:"model_config"`
	Settings    []byte `json:"settings"` // dllm.json as rank 0 has it
}

// follow hands rank 0's start (whether it resumes, the checkpoint's state,
// the model config and the diffusion settings, or its failure) to the
// other ranks, which look at neither the checkpoints nor the model
// directory; it returns whether the run resumes.
func (t *trainer) follow(resuming bool, leadErr error) (bool, error) {
	if t.group == nil {
		return resuming, leadErr
	}
	var st startState
	if t.leads() {
		st = startState{Resuming: resuming, State: t.state, ModelConfig: t.modelConfig, Settings: t.settingsRaw}
		if leadErr != nil {
			st = startState{Err: leadErr.Error()}
		}
	}
	b, _ := json.Marshal(st) // plain values: cannot fail
	b = t.group.BroadcastBytes(0, b)
	if t.leads() {
		return resuming, leadErr
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return false, fmt.Errorf("train: rank 0's start state: %w", err)
	}
	if st.Err != "" {
		return false, errors.New("train: rank 0 could not start: " + st.Err)
	}
	var s diffusion.Settings
	if err := jsonUnmarshal(st.Settings, &s); err != nil {
		return false, fmt.Errorf("train: rank 0's diffusion settings: %w", err)
	}
	t.state, t.modelConfig, t.settingsRaw, t.settings = st.State, st.ModelConfig, st.Settings, &s
	return st.Resuming, nil
}

// syncWeights gives every rank rank 0's master weights (loaded, resumed or
// drawn there) and, when resuming, its AdamW moments.
func (t *trainer) syncWeights(resuming bool) {
	if t.group == nil {
		return
	}
	t.group.Broadcast(0, t.all...)
	if resuming {
		for _, o := range t.opts {
			t.group.Broadcast(0, o.M...)
			t.group.Broadcast(0, o.V...)
		}
	}
}

// mine is this rank's share of a step's micro-batches: a contiguous run,
// so that rank r of N computes what one process computes in positions
// [r*n/N, (r+1)*n/N).
func (t *trainer) mine(mbs []*microBatch) []*microBatch {
	if t.group == nil {
		return mbs
	}
	r, w, n := t.group.Rank(), t.group.World(), len(mbs)
	return mbs[r*n/w : (r+1)*n/w]
}

// reduce sums the step's gradients and loss parts over the ranks (each
// computed its share of both). FLOPs stay this rank's: MFU is per device.
func (t *trainer) reduce(st *stepStats) error {
	if t.group == nil {
		return nil
	}
	if err := torch.Try(func() { t.group.AllReduceGrads(t.all) }); err != nil {
		return fmt.Errorf("train: step %d: %w", t.state.Step+1, err)
	}
	v, err := t.sum(st.loss, st.arLoss, st.distill, st.conf)
	if err != nil {
		return err
	}
	st.loss, st.arLoss, st.distill, st.conf = v[0], v[1], v[2], v[3]
	return nil
}

// sum adds xs over the ranks, in float64.
func (t *trainer) sum(xs ...float64) (v []float64, err error) {
	if t.group == nil {
		return xs, nil
	}
	defer torch.Recover(&err)
	cpu := torch.FromSlice(xs)
	defer cpu.Free()
	x := cpu.To(torch.Float64, t.dev)
	defer x.Free()
	t.group.AllReduce(x)
	return torch.ToSlice[float64](x), nil
}

// agree is true on every rank when stop is true on any: all ranks must
// leave the loop after the same step (a signal reaches them at different
// moments), or the ones that go on would wait for the others forever.
func (t *trainer) agree(stop bool) (bool, error) {
	v, err := t.sum(map[bool]float64{true: 1}[stop])
	if err != nil {
		return false, err
	}
	return v[0] > 0, nil
}

// injectFault ends the process after step as a crashed rank would, when
// DLLM_FAULT_EXIT asks it to.
func (t *trainer) injectFault(step int) {
	if d := t.o.Dist; d != nil && d.ExitAfterStep == step {
		fmt.Fprintf(os.Stderr, "train: rank %d: injected fault (DLLM_FAULT_EXIT): exiting after step %d\n", d.Rank, step)
		os.Exit(3)
	}
}
