package convert

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"dllm/model"
	"dllm/tokenizer"
)

// The tensors that hold one row per token id.
const (
	embedName = "model.embed_tokens.weight"
	headName  = "lm_head.weight"
)

// chooseMask picks the mask token's id. An existing token is reused as it
// is. Otherwise the first padded row is taken: ids at or past the
// tokenizer's last id are never produced by encoding, so their rows were
// never trained as inputs and the model loses nothing by giving one a
// meaning. Only without padding does the vocabulary grow, which forces the
// embedding and lm_head to be rewritten.
func chooseMask(cfg *model.Config, tok *tokenizer.Tokenizer, token string) (Mask, error) {
	m := Mask{Token: token, TokenizerIDs: tok.VocabSize(), Rows: cfg.VocabSize}
	if m.TokenizerIDs > m.Rows {
		return m, fmt.Errorf("the tokenizer defines %d ids but the model has only %d embedding rows (vocab_size)", m.TokenizerIDs, m.Rows)
	}
	if id, ok := tok.TokenID(token); ok {
		m.ID, m.How = id, MaskExisting
		return m, nil
	}
	m.ID = m.TokenizerIDs
	m.How = MaskPadded
	if m.ID == m.Rows {
		m.How = MaskGrown
	}
	return m, nil
}

// meanRow averages the rows of a [rows, cols] matrix of dtype dt read
// from r, in float64 so that a 130k-row sum loses nothing, and returns it
// as float32.
func meanRow(r io.Reader, dt model.DType, rows, cols int) ([]float32, error) {
	sum := make([]float64, cols)
	size := dt.Size()
	row := make([]byte, cols*size)
	br := bufio.NewReaderSize(r, 1<<20)
	for range rows {
		if _, err := io.ReadFull(br, row); err != nil {
			return nil, err
		}
		for c := range sum {
			sum[c] += float64(loadFloat(row[c*size:], dt))
		}
	}
	mean := make([]float32, cols)
	for c, s := range sum {
		mean[c] = float32(s / float64(rows))
	}
	return mean, nil
}

// loadFloat reads one little-endian element of a floating dtype.
func loadFloat(b []byte, dt model.DType) float32 {
	switch dt {
	case model.BF16:
		return model.BF16ToFloat32(binary.LittleEndian.Uint16(b))
	case model.F16:
		return model.F16ToFloat32(binary.LittleEndian.Uint16(b))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b))
}

// storeFloat writes one element, rounding as torch does.
func storeFloat(b []byte, dt model.DType, f float32) {
	switch dt {
	case model.BF16:
		binary.LittleEndian.PutUint16(b, model.Float32ToBF16(f))
	case model.F16:
		binary.LittleEndian.PutUint16(b, model.Float32ToF16(f))
	default:
		binary.LittleEndian.PutUint32(b, math.Float32bits(f))
	}
}
