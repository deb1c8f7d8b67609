package model

import (
	"fmt"
	"math"
)

// DType is a safetensors element type.
type DType uint8

// The element types dllm reads and writes. The zero value is invalid so a
// forgotten field is caught by WriteSafetensors.
const (
	F64 DType = iota + 1
	F32
	F16
	BF16
	I64
	I32
	I16
	I8
	U8
	Bool
)

var dtypeNames = [...]string{F64: "F64", F32: "F32", F16: "F16", BF16: "BF16",
	I64: "I64", I32: "I32", I16: "I16", I8: "I8", U8: "U8", Bool: "BOOL"}

var dtypeSizes = [...]int{F64: 8, F32: 4, F16: 2, BF16: 2,
	I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, Bool: 1}

// String is the dtype's name in a safetensors header ("BF16", ...).
func (d DType) String() string {
	if d == 0 || int(d) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Size is the element size in bytes; 0 for an invalid DType.
func (d DType) Size() int {
	if int(d) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[d]
}

// ParseDType maps a safetensors header name to a DType.
func ParseDType(s string) (DType, error) {
	for d, name := range dtypeNames {
		if name != "" && name == s {
			return DType(d), nil
		}
	}
	return 0, fmt.Errorf("unsupported dtype %q", s)
}

// BF16ToFloat32 widens a bfloat16 bit pattern; it is exact, bf16 being the
// top half of a float32.
func BF16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// Float32ToBF16 rounds to nearest, ties to even, as torch's .to(bfloat16)
// does. NaNs stay NaN (quiet) rather than rounding into infinity.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 widens an IEEE half bit pattern, subnormals, infinities and
// NaN payloads included; it is exact.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
	// Subnormal or zero: mant * 2^-24 is exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// Float32ToF16 rounds to the nearest IEEE half, ties to even, with overflow
// to infinity and gradual underflow to subnormals, as torch's .to(float16).
func Float32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	mant := u & 0x7fffff
	if exp == 0xff {
		if mant != 0 { // NaN: keep the top payload bits, force quiet
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // half's biased exponent
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		// Below 2^-25 everything rounds to zero (exactly 2^-25 ties to even 0).
		if e < -10 {
			return sign
		}
		// Value is m * 2^(exp-150); a half subnormal unit is 2^-24.
		m := mant | 0x800000
		shift := uint32(14 - e)
		return sign | uint16(roundShift(m, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent, up to inf.
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundShift is v >> s rounded to nearest, ties to even.
func roundShift(v, s uint32) uint32 {
	q := v >> s
	rem := v & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}
