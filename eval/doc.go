// Package eval runs a set of questions with exact answers against any
// OpenAI-compatible chat endpoint and scores the replies: the engine of
// `dllm eval` and of the conversion proxy (docs/proxy.md).
//
// An eval file is JSONL, one Item per line, as `dllm data synth` writes
// heldout.jsonl. Answers are read from the reply's content ("Answer: X"),
// falling back to the last "Answer: X" in the content or reasoning, and
// compared exactly: numbers after normalisation, choice letters by letter.
package eval
