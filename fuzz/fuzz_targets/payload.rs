//! libFuzzer entry point of the `payload` target (fuzz/targets/payload.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::payload::run(data);
});
