//! radix-macros
