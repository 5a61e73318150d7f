//! radix-pjrt
