//! radix
