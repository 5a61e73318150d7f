//! The attributes of a custom call site (`backend_config` entries): the
//! values XLA's FFI hands a handler, printed into a module by the IR and
//! decoded by the PJRT runtime, so both read them from here.

/// The string attribute that names the Rust handler of a call site; every
/// custom call radix emits carries it in its `backend_config`.
pub const NAME_ATTR: &str = "radix.name";

/// An attribute value a handler receives: the types XLA's FFI encodes and
/// radix emits. Two values are equal when their bits are (a kernel given
/// either reads the same bytes): a NaN equals itself, `0.0` is not `-0.0`;
/// so equality is an `Eq` and hashing agrees with it.
#[derive(Debug, Clone)]
pub enum AttrValue {
    /// `true` / `false` (`i1`).
    Bool(bool),
    /// `42 : i32`.
    I32(i32),
    /// `42 : i64`.
    I64(i64),
    /// An `f32` scalar.
    F32(f32),
    /// An `f64` scalar.
    F64(f64),
    /// A string.
    Str(String),
    /// `array<i32: ...>`.
    I32s(Vec<i32>),
    /// `array<i64: ...>`.
    I64s(Vec<i64>),
    /// `array<f32: ...>`.
    F32s(Vec<f32>),
    /// `array<f64: ...>`.
    F64s(Vec<f64>),
}

impl AttrValue {
    /// The variant and its payload as integers: floats by their bits.
    fn bits(&self) -> (u8, Vec<u64>, Option<&str>) {
        match self {
            AttrValue::Bool(b) => (0, vec![u64::from(*b)], None),
            AttrValue::I32(x) => (1, vec![*x as u64], None),
            AttrValue::I64(x) => (2, vec![*x as u64], None),
            AttrValue::F32(x) => (3, vec![u64::from(x.to_bits())], None),
            AttrValue::F64(x) => (4, vec![x.to_bits()], None),
            AttrValue::Str(s) => (5, vec![], Some(s)),
            AttrValue::I32s(xs) => (6, xs.iter().map(|&x| x as u64).collect(), None),
            AttrValue::I64s(xs) => (7, xs.iter().map(|&x| x as u64).collect(), None),
            AttrValue::F32s(xs) => (8, xs.iter().map(|x| u64::from(x.to_bits())).collect(), None),
            AttrValue::F64s(xs) => (9, xs.iter().map(|x| x.to_bits()).collect(), None),
        }
    }
}

impl PartialEq for AttrValue {
    fn eq(&self, other: &AttrValue) -> bool {
        self.bits() == other.bits()
    }
}

impl Eq for AttrValue {}

impl std::hash::Hash for AttrValue {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.bits().hash(h);
    }
}

macro_rules! attr_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for AttrValue {
            fn from(x: $t) -> AttrValue {
                AttrValue::$v(x.into())
            }
        }
    )*};
}

attr_from!(bool => Bool, i32 => I32, i64 => I64, f32 => F32, f64 => F64, &str => Str,
    String => Str, Vec<i32> => I32s, Vec<i64> => I64s, Vec<f32> => F32s, Vec<f64> => F64s);

/// The attributes of one call, sorted by name: what its kernel reads
/// through its kernel and the `backend_config` it is printed with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Attrs {
    entries: Vec<(String, AttrValue)>,
}

impl Attrs {
    /// No attributes.
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// These attributes with `name` set to `value` (replacing an earlier
    /// value). Names are MLIR identifiers (`[A-Za-z_][A-Za-z0-9_$.]*`),
    /// and `radix.` is reserved; [`Attrs::check`] checks both.
    pub fn with(mut self, name: &str, value: impl Into<AttrValue>) -> Attrs {
        let value = value.into();
        match self.entries.binary_search_by(|e| e.0.as_str().cmp(name)) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (name.to_string(), value)),
        }
        self
    }

    /// The attributes, sorted by name.
    pub fn entries(&self) -> &[(String, AttrValue)] {
        &self.entries
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.entries
            .binary_search_by(|e| e.0.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    fn typed<'s, T>(
        &'s self,
        name: &str,
        want: &str,
        f: impl FnOnce(&'s AttrValue) -> Option<T>,
    ) -> std::result::Result<T, String> {
        match self.get(name) {
            None => Err(format!("no attribute {name}")),
            Some(v) => f(v).ok_or_else(|| format!("attribute {name} is {v:?}, not {want}")),
        }
    }

    /// The `i64` attribute `name`.
    pub fn i64(&self, name: &str) -> std::result::Result<i64, String> {
        self.typed(name, "an i64", |v| match v {
            AttrValue::I64(x) => Some(*x),
            _ => None,
        })
    }

    /// The `f32` attribute `name`.
    pub fn f32(&self, name: &str) -> std::result::Result<f32, String> {
        self.typed(name, "an f32", |v| match v {
            AttrValue::F32(x) => Some(*x),
            _ => None,
        })
    }

    /// The string attribute `name`.
    pub fn str(&self, name: &str) -> std::result::Result<&str, String> {
        self.typed(name, "a string", |v| match v {
            AttrValue::Str(x) => Some(x.as_str()),
            _ => None,
        })
    }

    /// Why these attributes cannot be printed, if they cannot: a name that
    /// is not an MLIR identifier or uses the reserved prefix `radix.`, a
    /// float array with a value that is not finite.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (name, v) in &self.entries {
            let mut chars = name.chars();
            let ok_first = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !ok_first
                || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
            {
                return Err(format!("attribute name {name:?} is not an MLIR identifier"));
            }
            if name.starts_with("radix.") {
                return Err(format!(
                    "attribute name {name} uses the reserved prefix radix."
                ));
            }
            let finite = match v {
                AttrValue::F32s(xs) => xs.iter().all(|x| x.is_finite()),
                AttrValue::F64s(xs) => xs.iter().all(|x| x.is_finite()),
                _ => true,
            };
            if !finite {
                return Err(format!("attribute {name}: float arrays must be finite"));
            }
        }
        Ok(())
    }
}
