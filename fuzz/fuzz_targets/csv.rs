//! Fuzz target: `weir::fuzz::csv` on arbitrary bytes (errors are fine, panics are not).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz::csv(data);
});
