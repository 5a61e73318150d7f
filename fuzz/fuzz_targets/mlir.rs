#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| radix_fuzz::targets::mlir(data));
