// Package synth generates small chat tasks with exact answers that need a
// few steps of reasoning: column addition, long multiplication, multiple
// choice over computed values and tracing a toy program. They are the
// measurable proxy for the AR -> diffusion conversion (docs/proxy.md): a
// tiny teacher can learn them on a CPU in minutes, their answers are
// checked exactly, and each has a known chance level, so "how much of the
// teacher's skill the diffusion model kept" is a number.
//
// Every problem has a canonical form; held-out problems are drawn first and
// any training problem whose canonical hash matches one is rejected, so the
// splits are disjoint by construction. The same seed gives the same files.
package synth
