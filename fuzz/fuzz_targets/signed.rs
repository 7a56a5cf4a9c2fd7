//! libFuzzer entry point of the `signed` target (fuzz/targets/signed.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::signed::run(data);
});
