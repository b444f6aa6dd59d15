//! Fuzz target: `weir::fuzz::checkpoint_metadata` on arbitrary bytes (errors are fine, panics are not).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz::checkpoint_metadata(data);
});
