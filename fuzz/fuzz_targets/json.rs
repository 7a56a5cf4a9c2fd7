//! libFuzzer entry point of the `json` target (fuzz/targets/json.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::json::run(data);
});
