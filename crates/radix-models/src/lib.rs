//! radix-models
