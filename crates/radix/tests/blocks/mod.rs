//! Random and extreme GGUF blocks for the tests of the quantized ops, and
//! their reference decoding.

#![allow(dead_code)]

use radix::quant::Format;

pub use radix_quant::testing::Rng;

/// What the blocks of a test hold.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Random code bytes, small random f16 scales of either sign.
    Random,
    /// Every code bit set: the largest codes (and K-quant sub-scales).
    AllOnes,
    /// Every code bit clear.
    AllZeros,
    /// Random codes, scales +0 and -0.
    ZeroScales,
    /// Random codes, scales at the ends of f16: ±65504, subnormals, the
    /// smallest normal.
    ExtremeScales,
}

pub const KINDS: [Kind; 5] = [
    Kind::Random,
    Kind::AllOnes,
    Kind::AllZeros,
    Kind::ZeroScales,
    Kind::ExtremeScales,
];

/// One block of `format`. Scales are finite f16s as `kind` says. F32, F16
/// and BF16 blocks are one finite element: random bits (`Random`), the most
/// negative value (`AllOnes`), +0 (`AllZeros`), -0 (`ZeroScales`) or a
/// random subnormal (`ExtremeScales`).
pub fn block(format: Format, kind: Kind, rng: &mut Rng) -> Vec<u8> {
    let float = match format {
        Format::F32 => Some((32, 23)),
        Format::F16 => Some((16, 10)),
        Format::BF16 => Some((16, 7)),
        _ => None,
    };
    if let Some((bits, man)) = float {
        let sign = 1u64 << (bits - 1);
        let exponent = (sign - 1) & !((1u64 << man) - 1);
        let x = match kind {
            Kind::Random => {
                let x = rng.next() & ((sign << 1) - 1);
                // An all-ones exponent (inf, NaN) loses its top bit.
                if x & exponent == exponent {
                    x & !(sign >> 1)
                } else {
                    x
                }
            }
            Kind::AllOnes => sign | (exponent - 1),
            Kind::AllZeros => 0,
            Kind::ZeroScales => sign,
            Kind::ExtremeScales => rng.next() & (sign | ((1u64 << man) - 1)),
        };
        return x.to_le_bytes()[..bits / 8].to_vec();
    }
    let mut block: Vec<u8> = (0..format.block_bytes())
        .map(|_| match kind {
            Kind::AllOnes => 0xFF,
            Kind::AllZeros => 0,
            _ => rng.next() as u8,
        })
        .collect();
    // ±65504, ±2^-24, the largest subnormal, the smallest normal.
    const EXTREMES: [u16; 6] = [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400];
    for at in radix_quant::blocks::f16_offsets(format) {
        let d = match kind {
            Kind::ZeroScales => (rng.next() as u16 & 1) << 15,
            Kind::ExtremeScales => EXTREMES[rng.next() as usize % EXTREMES.len()],
            _ => half::f16::from_f32(0.05 * rng.unit()).to_bits(),
        };
        block[at..at + 2].copy_from_slice(&d.to_le_bytes());
    }
    block
}

/// The reference decoding of whole rows of `format`.
pub fn reference(format: Format, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / format.block_bytes() * format.block_len();
    let mut out = vec![f32::NAN; n];
    radix_quant::dequantize(format, bytes, &mut out).expect("whole blocks");
    out
}
