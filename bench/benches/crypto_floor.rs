//! Row 3's cryptographic floor under criterion: one Ed25519 verify (with the
//! strict parse and JCS it needs) plus one sign (with its JCS) per iteration,
//! using the node's own `crypto::envelope`.

use agora_bench::floor;
use criterion::{Criterion, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;

fn crypto_floor(c: &mut Criterion) {
    let client = SigningKey::from_bytes(&[7u8; 32]);
    let node = SigningKey::from_bytes(&[9u8; 32]);
    let request = floor::sum_request(&client);
    let request_bytes = request.to_string().into_bytes();
    let reply = floor::sum_result(&request, &node);
    c.bench_function("envelope_verify_plus_sign", |b| {
        b.iter(|| floor::verify_and_sign(&request_bytes, &reply, &node))
    });
}

criterion_group!(benches, crypto_floor);
criterion_main!(benches);
