// Package tokenizer loads HuggingFace tokenizer.json files (byte-level and
// SentencePiece-style BPE) and reproduces the `tokenizers` library's
// encodings exactly, decodes ids back to text (also incrementally, for
// streaming), and renders a checkpoint's own Jinja chat template.
//
// A Tokenizer is immutable after loading and safe for concurrent use.
package tokenizer
