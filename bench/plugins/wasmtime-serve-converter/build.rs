//! Bakes the SHA-1 of `protocols/unit-conversion.md` into the component, the
//! hash row 1's requests name, so a request for another protocol is refused.

use sha1::{Digest, Sha1};

fn main() {
    let document = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../protocols/unit-conversion.md"
    );
    println!("cargo::rerun-if-changed={document}");
    let text = std::fs::read(document).expect("protocols/unit-conversion.md is readable");
    let hash: String = Sha1::digest(&text).iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo::rustc-env=UNIT_CONVERSION_HASH={hash}");
}
