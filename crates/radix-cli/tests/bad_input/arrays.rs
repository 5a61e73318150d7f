//! `.npz` and `.npy` inputs of `radix run`: missing, not zip or not npy,
//! truncated, damaged, a zip bomb, headers claiming more data than the file
//! holds, dtypes radix has no type for, and arrays that do not fit the
//! module's signature.

use std::io::Write;

use radix_pjrt::ElementType;

use crate::mlir::run_case;
use crate::npy::{self, Array};
use crate::{Case, check, data, patched, write};

fn zeros(ty: ElementType, dims: &[i64]) -> Array {
    let n = radix_pjrt::byte_len(ty, dims).unwrap();
    Array::new(ty, dims.to_vec(), vec![0; n]).unwrap()
}

/// The bytes of an `.npz` of `entries` (name, bytes), stored or deflated.
fn zip(entries: &[(&str, &[u8])], deflate: bool) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut z = zip::ZipWriter::new(&mut out);
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(method)
        .large_file(true);
    for (name, bytes) in entries {
        z.start_file(*name, options).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
    out.into_inner()
}

/// A version 1.0 `.npy` of header `dict` (padded as numpy pads it) and
/// the 60 data bytes of a zero `f32[3, 5]` (softmax's argument).
fn npy_raw(dict: &str) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.as_bytes());
    b.extend([0u8; 60]);
    b
}

/// [`npy_raw`] of a header with `descr` and `shape`.
fn npy_with(descr: &str, shape: &str) -> Vec<u8> {
    npy_raw(&format!(
        "{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}"
    ))
}

#[test]
fn npz_and_npy() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "softmax.mlir",
        std::fs::read(data("softmax.mlir")).unwrap(),
    );
    write(d, "out.npz", "the user's own results");
    let good = std::fs::read(data("softmax_inputs.npz")).unwrap();
    write(
        d,
        "not_zip.npz",
        std::fs::read(data("softmax.mlir")).unwrap(),
    );
    write(d, "truncated.npz", &good[..good.len() / 2]);
    write(d, "empty.npz", b"");
    let good_npy = npy::npy_bytes(&zeros(ElementType::F32, &[3, 5])).unwrap();
    write(
        d,
        "garbage_entry.npz",
        zip(&[("arr_0.npy", b"not an npy at all")], false),
    );
    // A stored entry with one data byte changed: its CRC no longer matches.
    let mut bad_crc = zip(&[("arr_0.npy", &good_npy)], false);
    let at = bad_crc.len() / 3;
    bad_crc[at] ^= 0x55;
    write(d, "bad_crc.npz", bad_crc);
    write(
        d,
        "no_arrays.npz",
        zip(&[("readme.txt", b"no arrays here")], true),
    );
    write(
        d,
        "wrong_dtype.npz",
        zip(
            &[(
                "arr_0.npy",
                &npy::npy_bytes(&zeros(ElementType::S32, &[3, 5])).unwrap(),
            )],
            false,
        ),
    );
    write(
        d,
        "wrong_shape.npz",
        zip(
            &[(
                "arr_0.npy",
                &npy::npy_bytes(&zeros(ElementType::F32, &[3, 4])).unwrap(),
            )],
            false,
        ),
    );
    write(
        d,
        "two.npz",
        zip(&[("arr_0.npy", &good_npy), ("arr_1.npy", &good_npy)], false),
    );
    write(d, "bomb.npz", zip_bomb());

    write(d, "good.npy", &good_npy);
    write(d, "truncated.npy", &good_npy[..good_npy.len() - 7]);
    write(
        d,
        "bad_magic.npy",
        patched(&good_npy, b"\x93NUMPY", b"\x93NUMPX"),
    );
    assert_eq!(npy_with("'<f4'", "(3, 5, )"), good_npy);
    write(d, "huge.npy", npy_with("'<f4'", "(1000000, 1000000)"));
    write(
        d,
        "overflow.npy",
        npy_with("'<f4'", "(4294967296, 4294967296, 4294967296)"),
    );
    write(d, "negative.npy", npy_with("'<f4'", "(-3, 5)"));
    write(d, "object.npy", npy_with("'|O'", "(3, 5)"));
    write(d, "complex256.npy", npy_with("'<c32'", "(3, 5)"));
    write(d, "structured.npy", npy_with("[('a', '<f4')]", "(3, 5)"));
    // npyz's header parser backtracks: 60 nested brackets took minutes
    // (found by the npy fuzz target).
    write(
        d,
        "nested.npy",
        npy_with("'<f4'", &format!("({})", "{".repeat(60))),
    );
    write(
        d,
        "long_header.npy",
        npy_with("'<f4'", &format!("(3, 5{})", " ".repeat(20_000))),
    );
    write(
        d,
        "unclosed.npy",
        npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5"),
    );
    write(d, "no_header_end.npy", &good_npy[..20]);
    write(d, "empty.npy", b"");

    let npz = |name: &'static str, file: &str, want: &str| {
        run_case(name, "softmax.mlir", file, &[], want)
    };
    let npy = |name: &'static str, files: &[&str], want: &str| {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"run", &"softmax.mlir", &"--output", &"out.npz"];
        for f in files {
            args.push(f);
        }
        Case::new(name, &args, want)
    };
    let cases = vec![
        npz("a missing .npz", "nope.npz", "cannot read nope.npz"),
        npz(
            "an .npz that is not a zip",
            "not_zip.npz",
            "not_zip.npz is not a .npz (zip) file",
        ),
        npz(
            "a truncated .npz",
            "truncated.npz",
            "truncated.npz is not a .npz (zip) file",
        ),
        npz(
            "an empty .npz",
            "empty.npz",
            "empty.npz is not a .npz (zip) file",
        ),
        npz(
            "an entry that is not .npy",
            "garbage_entry.npz",
            "array arr_0 of garbage_entry.npz",
        ),
        npz(
            "a damaged entry",
            "bad_crc.npz",
            "array arr_0 of bad_crc.npz: Invalid checksum",
        ),
        npz(
            "an .npz without arrays",
            "no_arrays.npz",
            "@main takes 1 arguments, 0 inputs given",
        ),
        npz(
            "an input of the wrong dtype",
            "wrong_dtype.npz",
            "argument 0 of @main is tensor<3x5xf32>, input arr_0 of wrong_dtype.npz is tensor<3x5xi32>",
        ),
        npz(
            "an input of the wrong shape",
            "wrong_shape.npz",
            "input arr_0 of wrong_shape.npz is tensor<3x4xf32>",
        ),
        npz(
            "too many inputs",
            "two.npz",
            "@main takes 1 arguments, 2 inputs given",
        ),
        npz("a zip bomb", "bomb.npz", "more than any argument takes"),
        npy("a missing .npy", &["nope.npy"], "cannot read nope.npy"),
        npy(
            "a truncated .npy",
            &["truncated.npy"],
            "60 data bytes expected, 53 present",
        ),
        npy(
            "a bad magic",
            &["bad_magic.npy"],
            "bad_magic.npy is not a usable .npy file",
        ),
        npy(
            "a header claiming 10^12 elements",
            &["huge.npy"],
            "huge.npy is not a usable .npy file",
        ),
        npy(
            "a header whose size overflows",
            &["overflow.npy"],
            "overflow.npy is not a usable .npy file",
        ),
        npy(
            "a negative dim",
            &["negative.npy"],
            "negative.npy is not a usable .npy file",
        ),
        npy(
            "an object dtype",
            &["object.npy"],
            "object.npy is not a usable .npy file",
        ),
        npy(
            "a complex256 dtype",
            &["complex256.npy"],
            "complex256.npy is not a usable .npy file",
        ),
        npy(
            "a structured dtype",
            &["structured.npy"],
            "structured.npy is not a usable .npy file",
        ),
        npy(
            "a header nesting 60 brackets",
            &["nested.npy"],
            "nested.npy is not a usable .npy file: its header nests brackets more than 8 deep",
        ),
        npy(
            "a header of 20,000 bytes",
            &["long_header.npy"],
            "more than the 10000 numpy reads",
        ),
        npy(
            "an unclosed header",
            &["unclosed.npy"],
            "unclosed.npy is not a usable .npy file",
        ),
        npy(
            "a header cut short",
            &["no_header_end.npy"],
            "no_header_end.npy is not a usable .npy file",
        ),
        npy(
            "an empty .npy",
            &["empty.npy"],
            "empty.npy is not a usable .npy file",
        ),
        npy(
            "two arrays for one argument",
            &["good.npy", "good.npy"],
            "@main takes 1 arguments, 2 inputs given",
        ),
    ];
    eprintln!("{} array cases", check(d, cases));
}

/// A small `.npz` whose one array inflates to 64 MiB of zeros.
fn zip_bomb() -> Vec<u8> {
    let n: usize = 16 << 20;
    let header = npy::npy_bytes(&zeros(ElementType::F32, &[0])).unwrap();
    // The header of an empty array, its shape patched to `n` elements.
    let header = String::from_utf8_lossy(&header).replace("(0,)", &format!("({n},)"));
    let mut body = header.into_bytes();
    body.resize(body.len() + n * 4, 0);
    let bytes = zip(&[("arr_0.npy", &body)], true);
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    bytes
}
