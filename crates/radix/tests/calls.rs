//! Sub-function calls: `call` emits a private `func.func` once per distinct
//! body and argument shapes, and a `func.call` at each use.

use radix::testing::{Tol, check, trace_fn};
use radix::{DType, Literal, Module, Shape, Tensor, call};

/// One layer: `x + relu-ish(x · w)` with its scale as a plain parameter.
#[derive(Clone, Module)]
struct Layer {
    w: Tensor,
    x: Tensor,
    scale: f64,
}

fn layer(l: &Layer) -> Tensor {
    let h = l.x.dot(l.w, "d").rename("o", "d");
    l.x + h * l.scale
}

fn inputs() -> [Literal; 2] {
    [
        Literal::new(
            Shape::tagged(DType::F32, &[("b", 1), ("d", 2)]),
            vec![1., 2.],
        ),
        Literal::new(
            Shape::tagged(DType::F32, &[("o", 2), ("d", 2)]),
            vec![0.5, 0., 0., 0.5],
        ),
    ]
}

/// Runs `n` layers through `call` on (x, w); checks the count of private
/// functions and `func.call`s in the text, and returns the program's text.
fn check_layers(n: usize, scales: &[f64], n_funcs: usize) -> String {
    let program = trace_fn(&inputs(), |t| {
        let mut x = t[0];
        for i in 0..n {
            x = call(
                "layer",
                layer,
                &Layer {
                    w: t[1],
                    x,
                    scale: scales[i % scales.len()],
                },
            );
        }
        x
    })
    .unwrap();
    let text = program.optimize().stablehlo_without_locations();
    assert_eq!(text.matches("func.func private").count(), n_funcs, "{text}");
    assert_eq!(text.matches("\"func.call\"").count(), n, "{text}");
    text
}

#[test]
fn thirty_layers_emit_one_body() {
    let text = check_layers(30, &[1.0], 1);
    // The result keeps its tags, so the next layer's `dot` over "d" works,
    // and the body appears once.
    assert_eq!(text.matches("stablehlo.dot_general").count(), 1, "{text}");
    // Plain parameters that change the body give distinct functions.
    check_layers(4, &[1.0, 0.5], 2);
    // The caller's name, then the body's structural hash.
    assert!(text.contains("func.func private @layer_"), "{text}");
}

#[test]
fn equal_bodies_traced_at_different_lines_are_one_function() {
    // Two closures (two types, two source lines) with the same body: the
    // name and the identity come from the structure, not from where or
    // through which Rust function it was traced.
    let program = trace_fn(&inputs(), |t| {
        let a = call("block", |x: &Tensor| x.tanh() * *x, &t[0]);
        call("block", |x: &Tensor| x.tanh() * *x, &a)
    })
    .unwrap();
    let text = program.optimize().stablehlo_without_locations();
    assert_eq!(text.matches("func.func private").count(), 1, "{text}");
    assert_eq!(text.matches("\"func.call\"").count(), 2, "{text}");
}

#[test]
fn calls_compute_like_inline_code() {
    // x = [1, 2], w = diag(0.5): each layer maps x to 1.5 x.
    let y = check(
        &inputs(),
        |t| {
            let x = call(
                "layer",
                layer,
                &Layer {
                    w: t[1],
                    x: t[0],
                    scale: 1.0,
                },
            );
            call(
                "layer",
                layer,
                &Layer {
                    w: t[1],
                    x,
                    scale: 1.0,
                },
            )
        },
        &[2.25, 4.5],
        Tol::F32,
    );
    assert_eq!(y.shape(), Shape::tagged(DType::F32, &[("b", 1), ("d", 2)]));
}

/// Every node of a traced program is located at the user's line, the
/// results of multi-result ops and the nodes derivative rules make
/// included: no location names radix's own sources.
#[test]
fn every_location_is_the_users_line() {
    fn block(x: &Tensor) -> Tensor {
        x.sin() * 2.0
    }
    let x = Literal::new(Shape::new(DType::F32, &[2, 3]), vec![0.5; 6]);
    let program = trace_fn(&[x], |v| {
        let sorted = radix::sort(&[v[0], v[0].cos()], 1, |l, r| l[0].lt(r[0]));
        let called = call("block", block, &sorted[1]);
        let looped = radix::while_bounded(
            3,
            &[called],
            |s| s[0].sum([0, 1]).lt(Tensor::scalar(9.0, DType::F32)),
            |s| vec![s[0] + 1.0],
        )[0];
        let composites = (looped.softmax(1) + looped.gelu_tanh() + looped.cumsum(1)).mean([0, 1]);
        let (top, at) = looped.top_k(1, 2);
        let window = radix::Window {
            dims: vec![1, 2],
            strides: vec![1, 1],
            padding: vec![[0, 0], [0, 0]],
        };
        let pooled = looped.max_pool(&window).sum([0, 1]);
        let scattered = looped
            .scatter_add(1, at, looped.gather(1, at))
            .argmax(1)
            .convert(DType::F32)
            .sum(0);
        let picked = looped.gather(1, at).sum([0, 1]) + top.sum([0, 1]) + composites;
        let picked = picked + pooled + scattered;
        let mesh = radix::sharding::Mesh::new(&[1]);
        let per_device =
            radix::shard_map::shard_map(&mesh, &[vec![None]], &[vec![None]], &[picked], |b| {
                let index = radix::shard_map::axis_index(0).convert(DType::F32);
                vec![
                    radix::shard_map::all_reduce(b[0], radix::collective::ReduceOp::Mean, &[0])
                        + index,
                ]
            })[0];
        let picked = picked + per_device;
        let (_, stacked) = radix::for_(2, "step", &[picked], |i, s| {
            let next = s[0] * i.convert(DType::F32);
            (vec![next], vec![next])
        });
        let grads = radix::grad(
            |x: &Tensor, _: &()| (call("block", block, x) * looped).max(1).sum(0),
            &v[0],
            &(),
        );
        (grads, stacked[0])
    })
    .unwrap();
    let text = program.stablehlo();
    assert_no_line_of_radix(&text);
    assert!(text.contains("tests/calls.rs"), "{text}");
}

/// That no node of `text` (a module with locations) is located in
/// radix's own sources.
fn assert_no_line_of_radix(text: &str) {
    let radix_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("crates/radix/src") || l.contains("crates/radix-ir/src"))
        .collect();
    assert!(radix_lines.is_empty(), "{}", radix_lines.join("\n"));
}

/// A block of radix's layers, for the locations of the nodes they make.
#[derive(Clone, Module)]
struct Layers {
    embed: radix::nn::Embedding,
    norm: radix::nn::RmsNorm,
    qkv: radix::nn::Linear,
    gated: radix::nn::GatedMlp,
    post: radix::nn::LayerNorm,
    mlp: radix::nn::Mlp,
}

#[test]
fn every_location_in_radix_layers_is_the_users_line() {
    use radix::nn::tags::{B, D, H, HD, K, Q, S};
    use radix::nn::*;
    let layers = Layers {
        embed: Embedding::new(11, (D, 8)),
        norm: RmsNorm::new((D, 8), 1e-6).with_offset(1.0),
        qkv: Linear::new((D, 8), ("o", 8)).with_bias().with_lora(2, 0.5),
        gated: GatedMlp::new((D, 8), 16).with_gelu_tanh(),
        post: LayerNorm::new((D, 8), 1e-5),
        mlp: Mlp::new((D, 8), 16),
    };
    let ids = Tensor::param(Shape::tagged(DType::I32, &[(B, 1), (S, 4)]));
    let lengths = Tensor::param(Shape::tagged(DType::I32, &[(B, 1)]));
    let cache = KvCache::param(KvCache::shape(1, 8, 2, 4, CacheType::F16).unwrap());
    let inputs = (ids, lengths, cache.k, cache.v);
    let program = radix::trace(&layers, &inputs, |m, (ids, lengths, ck, cv)| {
        let x = m.norm.forward(m.embed.forward(ids));
        let pos = Tensor::iota(Shape::tagged(DType::I32, &[(B, 1), (S, 4)]), S);
        let heads = |t: Tensor| {
            t.reshape_to(Shape::tagged(
                DType::F32,
                &[(B, 1), (S, 4), (H, 2), (HD, 4)],
            ))
        };
        let rope = Rotary::new(4, 10_000.0, RopeLayout::AdjacentPair);
        let q = rope.forward(heads(m.qkv.forward(x)), pos).rename(S, Q);
        let k = q.rename(Q, K);
        let mask = causal_mask(pos.rename(S, Q), pos.rename(S, K));
        let full = attention(q, k, k, Some(mask));
        let padded = padded_attention(q, k, k, lengths);
        let cache = KvCache { k: ck, v: cv }.write(Tensor::scalar(0.0, DType::I32), k, k);
        let cached = cached_attention(q, pos.rename(S, Q), cache, None);
        let y = (full + padded + cached)
            .reshape_to(Shape::tagged(DType::F32, &[(B, 1), (S, 4), (D, 8)]));
        let y = m
            .mlp
            .forward(m.post.forward(m.gated.forward(y) + gelu_erf(y)));
        (m.embed.unembed(y, D), cache.k, cache.v)
    })
    .unwrap();
    assert_no_line_of_radix(&program.stablehlo());
}
