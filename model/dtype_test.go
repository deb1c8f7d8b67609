package model

import (
	"math"
	"testing"
)

func TestDType(t *testing.T) {
	for _, tt := range []struct {
		d    DType
		name string
		size int
	}{{F64, "F64", 8}, {F32, "F32", 4}, {F16, "F16", 2}, {BF16, "BF16", 2}, {I64, "I64", 8},
		{I32, "I32", 4}, {I16, "I16", 2}, {I8, "I8", 1}, {U8, "U8", 1}, {Bool, "BOOL", 1}} {
		if tt.d.String() != tt.name || tt.d.Size() != tt.size {
			t.Errorf("%v: %q size %d", tt.d, tt.d.String(), tt.d.Size())
		}
		if d, err := ParseDType(tt.name); err != nil || d != tt.d {
			t.Errorf("ParseDType(%q) = %v, %v", tt.name, d, err)
		}
	}
	for _, s := range []string{"", "F8_E4M3", "bf16", "U64"} {
		if _, err := ParseDType(s); err == nil {
			t.Errorf("ParseDType(%q) accepted", s)
		}
	}
	if DType(0).Size() != 0 || DType(200).Size() != 0 || DType(200).String() != "DType(200)" {
		t.Error("invalid DType not reported as such")
	}
}

// Bit patterns below are derived by hand: bf16 is the top 16 bits of the
// float32 (sign, 8-bit exponent, 7-bit mantissa); half is sign, 5-bit
// exponent biased by 15, 10-bit mantissa.
func TestBF16(t *testing.T) {
	for _, tt := range []struct {
		f    float32
		bf16 uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{0.15625, 0x3e20}, // 1.25 * 2^-3, exact
		// 1 + 2^-8 is exactly between 0x3f80 and 0x3f81: ties to even 0x3f80.
		{math.Float32frombits(0x3f808000), 0x3f80},
		// 0x3f818000 ties between 0x3f81 and 0x3f82: ties to even 0x3f82.
		{math.Float32frombits(0x3f818000), 0x3f82},
		{math.Float32frombits(0x3f808001), 0x3f81}, // just above the tie
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // max float32 rounds to +inf
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x00000001), 0x0000}, // tiniest subnormal -> +0
		{math.Float32frombits(0x80000000), 0x8000}, // -0
	} {
		if got := Float32ToBF16(tt.f); got != tt.bf16 {
			t.Errorf("Float32ToBF16(%g = %#08x) = %#04x, want %#04x", tt.f, math.Float32bits(tt.f), got, tt.bf16)
		}
	}
	// NaN stays NaN even where truncation alone would give infinity.
	if got := Float32ToBF16(math.Float32frombits(0x7f800001)); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("NaN -> %#04x", got)
	}
	// Widening is exact for every pattern: bits shift back unchanged.
	for b := 0; b < 1<<16; b++ {
		f := BF16ToFloat32(uint16(b))
		if math.Float32bits(f) != uint32(b)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x", b, math.Float32bits(f))
		}
		if f == f && Float32ToBF16(f) != uint16(b) {
			t.Fatalf("bf16 %#04x does not round-trip", b)
		}
	}
}

func TestF16(t *testing.T) {
	for _, tt := range []struct {
		h uint16
		f float32
	}{
		{0x3c00, 1},
		{0xc000, -2},
		{0x3555, 0.333251953125},     // 1.0101010101b * 2^-2
		{0x7bff, 65504},              // max normal
		{0x0400, 1.0 / (1 << 14)},    // min normal 2^-14
		{0x0001, 1.0 / (1 << 24)},    // min subnormal 2^-24
		{0x03ff, 1023.0 / (1 << 24)}, // max subnormal
		{0x8001, -1.0 / (1 << 24)},
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
		{0x0000, 0},
	} {
		if got := F16ToFloat32(tt.h); got != tt.f {
			t.Errorf("F16ToFloat32(%#04x) = %g, want %g", tt.h, got, tt.f)
		}
		if got := Float32ToF16(tt.f); got != tt.h {
			t.Errorf("Float32ToF16(%g) = %#04x, want %#04x", tt.f, got, tt.h)
		}
	}
	if got := math.Float32bits(F16ToFloat32(0x8000)); got != 0x80000000 {
		t.Errorf("-0 widened to %#08x", got)
	}
	for _, tt := range []struct {
		f float32
		h uint16
	}{
		{1 + 1.0/2048, 0x3c00},               // tie between 0x3c00 and 0x3c01: even
		{1 + 3.0/2048, 0x3c02},               // tie between 0x3c01 and 0x3c02: even
		{1 + 1.0/2048 + 1.0/(1<<20), 0x3c01}, // just above the tie
		{65519, 0x7bff},                      // below the midpoint to 65536
		{65520, 0x7c00},                      // the midpoint ties to even: inf
		{1e6, 0x7c00},
		{1.0 / (1 << 25), 0x0000},           // half the min subnormal: ties to 0
		{1.0/(1<<25) + 1.0/(1<<35), 0x0001}, // just above: min subnormal
		{3.0 / (1 << 25), 0x0002},           // 1.5 units: ties to even 2
		{1023.5 / (1 << 24), 0x0400},        // max subnormal + half: carries to min normal
		{1.0 / (1 << 26), 0x0000},
		{-1.0 / (1 << 30), 0x8000},                 // underflow keeps the sign
		{math.Float32frombits(0x00000001), 0x0000}, // float32 subnormal
	} {
		if got := Float32ToF16(tt.f); got != tt.h {
			t.Errorf("Float32ToF16(%g) = %#04x, want %#04x", tt.f, got, tt.h)
		}
	}
	if got := Float32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", got)
	}
	if f := F16ToFloat32(0x7e01); f == f {
		t.Errorf("half NaN widened to %g", f)
	}
	// Every finite half widens exactly and narrows back to itself.
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		if got := Float32ToF16(f); got != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, f, got)
		}
	}
}
