// Package data turns public corpora (Parquet, Arrow IPC and JSONL files of
// plain text or OpenAI-style chats) into packed, fixed-length training
// sequences stored in checksummed, mmap-able shards, and reads them back.
//
// Prepare tokenizes the sources on all cores, mixes them by token share,
// packs documents back to back (EOS between documents, never padding) and
// writes shards plus a manifest.json; OpenShard reads a shard. The shard
// layout is documented in docs/data-format.md.
package data
