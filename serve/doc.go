// Package serve is dllm's OpenAI-compatible HTTP server: a thin translation
// layer from the chat and text completion APIs (as vLLM and SGLang serve
// them) to a block-diffusion sampler. Requests run one at a time on the
// model through a bounded FIFO queue; a streamed response sends each
// diffusion block as soon as it is committed. See docs/serve.md.
package serve
