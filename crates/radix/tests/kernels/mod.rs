//! Custom calls shared by the custom-call tests and benchmark.

#![allow(dead_code)]

use std::sync::LazyLock;

use radix::custom_call::{Attrs, CustomCall, Kernel};
use radix::{DType, Shape, Tensor};

/// `x / (1 + |x|)` on f32, with the same fallback in ops.
pub static SOFTSIGN: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.softsign",
        1,
        |s, _| {
            if s.len() != 1 || s[0].dtype() != DType::F32 {
                return Err(format!("wants one f32 tensor, got {s:?}"));
            }
            Ok(vec![s[0]])
        },
        |k| {
            let (x, y) = (k.input::<f32>(0)?, k.output::<f32>(0)?);
            for (y, &x) in y.iter_mut().zip(x) {
                *y = x / (1.0 + x.abs());
            }
            Ok(())
        },
    )
    .fallback(|x, _| vec![x[0] / (x[0].abs() + 1.0)])
    .register()
    .expect("declared")
});

/// `[m, k] @ [k, n]` on f32, rows split over up to `threads` (an i64
/// attribute) threads; the fallback is `matmul`.
pub static MATMUL: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.matmul",
        1,
        |s, _| match s {
            [a, b]
                if a.rank() == 2
                    && b.rank() == 2
                    && a.dims()[1] == b.dims()[0]
                    && a.dtype() == DType::F32
                    && b.dtype() == DType::F32 =>
            {
                Ok(vec![Shape::new(DType::F32, &[a.dims()[0], b.dims()[1]])])
            }
            _ => Err(format!("wants [m, k] and [k, n] f32 matrices, got {s:?}")),
        },
        matmul_kernel,
    )
    .fallback(|x, _| vec![x[0].matmul(x[1])])
    .register()
    .expect("declared")
});

fn matmul_kernel(k: &Kernel<'_>) -> Result<(), String> {
    let threads = k.attrs().i64("threads")?.max(1) as usize;
    let (a, b) = (k.input::<f32>(0)?, k.input::<f32>(1)?);
    let (sa, sb) = (k.input_shape(0).unwrap(), k.input_shape(1).unwrap());
    let (kk, n) = (sa.dims()[1] as usize, sb.dims()[1] as usize);
    let c = k.output::<f32>(0)?;
    // Blocks of 8 rows; each row accumulates a[i, p] * b[p, :].
    const ROWS: usize = 8;
    k.parallel_chunks_mut(c, ROWS * n, threads, |blk, rows| {
        rows.fill(0.0);
        for (r, out) in rows.chunks_mut(n).enumerate() {
            let i = blk * ROWS + r;
            for p in 0..kk {
                let aip = a[i * kk + p];
                let brow = &b[p * n..(p + 1) * n];
                for (o, &bv) in out.iter_mut().zip(brow) {
                    *o += aip * bv;
                }
            }
        }
    })
}

/// Adds 1 to its f32 operand in the operand's own buffer (output 0
/// aliases operand 0).
pub static ADD_ONE_IN_PLACE: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.add_one_in_place",
        1,
        |s, _| Ok(vec![s[0]]),
        |k| {
            for y in k.output::<f32>(0)? {
                *y += 1.0;
            }
            Ok(())
        },
    )
    .alias(0, 0)
    .register()
    .expect("declared")
});

/// Always fails with a message.
pub static FAILS: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.fails",
        1,
        |s, _| Ok(vec![s[0]]),
        |k| Err(format!("the kernel refuses {} inputs", k.n_inputs())),
    )
    .register()
    .expect("declared")
});

/// Always panics.
pub static PANICS: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder(
        "radix_test.panics",
        1,
        |s, _| Ok(vec![s[0]]),
        |_| panic!("the kernel panicked on purpose"),
    )
    .register()
    .expect("declared")
});

/// `softsign(x)` through the custom call.
pub fn softsign(x: Tensor) -> Tensor {
    SOFTSIGN.call(&[x], &Attrs::new())[0]
}

/// `a @ b` through the custom call on up to `threads` threads.
pub fn matmul(a: Tensor, b: Tensor, threads: i64) -> Tensor {
    MATMUL.call(&[a, b], &Attrs::new().with("threads", threads))[0]
}
