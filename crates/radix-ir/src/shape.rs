//! Shapes: an element type plus up to eight axes, each with a size and an
//! optional tag (a name such as `"b"` or `"d"`, as in ZML).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use crate::DType;

/// The most axes a shape may have.
pub const MAX_RANK: usize = 8;

/// The name of an axis. Cheap to copy and compare: tags are interned, so two
/// tags with the same text are the same `&'static str`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(&'static str);

impl Tag {
    /// The tag named `name` (interned once per distinct name).
    pub fn new(name: &str) -> Tag {
        static TAGS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
        let mut tags = TAGS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(&t) = tags.get(name) {
            return Tag(t);
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        tags.insert(leaked);
        Tag(leaked)
    }

    /// The tag's text.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ".{}", self.0)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl From<&str> for Tag {
    fn from(name: &str) -> Tag {
        Tag::new(name)
    }
}

/// An axis named by position (negative counts from the end) or by tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisRef {
    /// By position; `-1` is the last axis.
    Index(i64),
    /// By tag.
    Tag(Tag),
}

/// The size of one part of a split axis ([`Shape::split_axis`]): a number,
/// or [`Size::Auto`], what the other parts leave (ZML's `.auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Exactly this many elements.
    Exactly(i64),
    /// The axis size divided by the other parts' sizes.
    Auto,
}

impl From<i64> for Size {
    fn from(n: i64) -> Size {
        Size::Exactly(n)
    }
}

impl From<usize> for AxisRef {
    fn from(i: usize) -> AxisRef {
        AxisRef::Index(i as i64)
    }
}
impl From<i64> for AxisRef {
    fn from(i: i64) -> AxisRef {
        AxisRef::Index(i)
    }
}
impl From<i32> for AxisRef {
    fn from(i: i32) -> AxisRef {
        AxisRef::Index(i as i64)
    }
}
impl From<&str> for AxisRef {
    fn from(name: &str) -> AxisRef {
        AxisRef::Tag(Tag::new(name))
    }
}
impl From<Tag> for AxisRef {
    fn from(tag: Tag) -> AxisRef {
        AxisRef::Tag(tag)
    }
}

impl fmt::Display for AxisRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AxisRef::Index(i) => write!(f, "{i}"),
            AxisRef::Tag(t) => write!(f, ".{t}"),
        }
    }
}

/// A list of axes: one axis (`"d"`, `1`, `-1`), or an array, slice or `Vec` of them.
pub trait Axes {
    /// The axes as [`AxisRef`]s.
    fn to_refs(&self) -> Vec<AxisRef>;
}

macro_rules! single_axis {
    ($($t:ty),*) => {$(
        impl Axes for $t {
            fn to_refs(&self) -> Vec<AxisRef> {
                vec![(*self).into()]
            }
        }
    )*};
}
single_axis!(&str, usize, i64, i32, Tag, AxisRef);

impl<T: Into<AxisRef> + Copy, const N: usize> Axes for [T; N] {
    fn to_refs(&self) -> Vec<AxisRef> {
        self.iter().map(|&a| a.into()).collect()
    }
}
impl<T: Into<AxisRef> + Copy> Axes for &[T] {
    fn to_refs(&self) -> Vec<AxisRef> {
        self.iter().map(|&a| a.into()).collect()
    }
}
impl<T: Into<AxisRef> + Copy> Axes for Vec<T> {
    fn to_refs(&self) -> Vec<AxisRef> {
        self.iter().map(|&a| a.into()).collect()
    }
}

/// The shape of a tensor: dtype, sizes, optional tags and optional
/// sharding (the mesh axis each axis is split along; see
/// [`crate::sharding`]) of up to [`MAX_RANK`] axes. `Copy`, and compared by
/// value (tags and sharding included).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [i64; MAX_RANK],
    tags: [Option<Tag>; MAX_RANK],
    mesh_axes: [Option<u8>; MAX_RANK],
    rank: u8,
    dtype: DType,
}

impl Shape {
    /// A shape of `dtype` with sizes `dims` and no tags.
    ///
    /// # Panics
    /// With more than [`MAX_RANK`] axes or a negative size.
    pub fn new(dtype: DType, dims: &[i64]) -> Shape {
        assert!(
            dims.len() <= MAX_RANK,
            "rank {} exceeds {MAX_RANK}",
            dims.len()
        );
        assert!(dims.iter().all(|&d| d >= 0), "negative size in {dims:?}");
        let mut res = Shape {
            dims: [0; MAX_RANK],
            tags: [None; MAX_RANK],
            mesh_axes: [None; MAX_RANK],
            rank: dims.len() as u8,
            dtype,
        };
        res.dims[..dims.len()].copy_from_slice(dims);
        res
    }

    /// A rank-0 shape.
    pub fn scalar(dtype: DType) -> Shape {
        Shape::new(dtype, &[])
    }

    /// A shape from `(tag, size)` pairs: `Shape::tagged(F32, &[("b", 2), ("d", 8)])`.
    pub fn tagged(dtype: DType, axes: &[(&str, i64)]) -> Shape {
        let dims: Vec<i64> = axes.iter().map(|a| a.1).collect();
        let mut res = Shape::new(dtype, &dims);
        for (i, (t, _)) in axes.iter().enumerate() {
            res.tags[i] = Some(Tag::new(t));
        }
        res
    }

    /// This shape with its axes tagged `tags` in order (`""` leaves an axis untagged).
    ///
    /// # Panics
    /// If `tags` is longer than the rank.
    pub fn with_tags(mut self, tags: &[&str]) -> Shape {
        assert!(
            tags.len() <= self.rank(),
            "{} tags for rank {}",
            tags.len(),
            self.rank()
        );
        for (i, t) in tags.iter().enumerate() {
            self.tags[i] = if t.is_empty() {
                None
            } else {
                Some(Tag::new(t))
            };
        }
        self
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// This shape with element type `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Shape {
        self.dtype = dtype;
        self
    }

    /// Whether `other` has this dtype and these dims: the same tensor type
    /// in StableHLO (tags and sharding aside).
    pub fn same_type(&self, other: &Shape) -> bool {
        self.dtype == other.dtype && self.dims() == other.dims()
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// The sizes of the axes.
    pub fn dims(&self) -> &[i64] {
        &self.dims[..self.rank()]
    }

    /// The tags of the axes.
    pub fn tags(&self) -> &[Option<Tag>] {
        &self.tags[..self.rank()]
    }

    /// The same shape (tags, sharding) with axis `axis` of size `dim`
    /// (unchanged if there is no such axis).
    pub fn with_dim(mut self, axis: usize, dim: i64) -> Shape {
        if axis < self.rank() {
            self.dims[axis] = dim;
        }
        self
    }

    /// The number of elements.
    pub fn count(&self) -> usize {
        self.dims().iter().product::<i64>() as usize
    }

    /// The size in bytes of a dense array of this shape.
    pub fn byte_size(&self) -> usize {
        self.count() * self.dtype.size_in_bytes()
    }

    /// The position of `axis`, if this shape has it.
    pub fn axis(&self, axis: impl Into<AxisRef>) -> Option<usize> {
        match axis.into() {
            AxisRef::Index(i) => {
                let r = self.rank() as i64;
                let i = if i < 0 { i + r } else { i };
                (0..r).contains(&i).then_some(i as usize)
            }
            AxisRef::Tag(t) => self.tags().iter().position(|&x| x == Some(t)),
        }
    }

    /// The positions of `axes`, or a message naming the first missing one.
    pub fn resolve(&self, axes: &impl Axes) -> Result<Vec<usize>, String> {
        axes.to_refs()
            .into_iter()
            .map(|a| self.axis(a).ok_or_else(|| format!("no axis {a} in {self}")))
            .collect()
    }

    /// Whether this shape has an axis tagged `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.axis(tag).is_some()
    }

    /// The size of `axis`, if this shape has it.
    pub fn dim(&self, axis: impl Into<AxisRef>) -> Option<i64> {
        self.axis(axis).map(|i| self.dims[i])
    }

    /// The tag of axis `i`.
    pub fn tag(&self, i: usize) -> Option<Tag> {
        self.tags().get(i).copied().flatten()
    }

    /// This shape with axis `axis` tagged `tag` (`None` if no such axis).
    pub fn with_tag(mut self, axis: impl Into<AxisRef>, tag: &str) -> Option<Shape> {
        let i = self.axis(axis)?;
        self.tags[i] = Some(Tag::new(tag));
        Some(self)
    }

    /// This shape with `axis` split along mesh axis `mesh_axis` over the
    /// devices of a [`crate::sharding::Mesh`] (`None` if no such axis); an
    /// axis split along `mesh_axis` before is no longer split. Whether the
    /// mesh has that axis, and whether it divides the size, is checked
    /// against the mesh when uploading or compiling.
    pub fn shard(mut self, axis: impl Into<AxisRef>, mesh_axis: usize) -> Option<Shape> {
        let i = self.axis(axis)?;
        let m = Some(u8::try_from(mesh_axis).ok()?);
        for a in &mut self.mesh_axes {
            if *a == m {
                *a = None;
            }
        }
        self.mesh_axes[i] = m;
        Some(self)
    }

    /// The mesh axis each axis is split along (`None`: whole on every device).
    pub fn mesh_axes(&self) -> Vec<Option<usize>> {
        self.mesh_axes[..self.rank()]
            .iter()
            .map(|m| m.map(usize::from))
            .collect()
    }

    /// Whether some axis is split over devices.
    pub fn is_sharded(&self) -> bool {
        self.mesh_axes.iter().any(Option::is_some)
    }

    /// This shape with no axis split (replicated on every device).
    pub fn unsharded(mut self) -> Shape {
        self.mesh_axes = [None; MAX_RANK];
        self
    }

    /// This shape with tag `from` renamed `to` (`None` if no axis is tagged `from`).
    pub fn rename(self, from: &str, to: &str) -> Option<Shape> {
        self.with_tag(from, to)
    }

    /// This shape with a new axis of size `dim` (tagged `tag` unless empty)
    /// inserted at position `at` (`0..=rank`); `None` if out of range.
    pub fn insert_axis(self, at: usize, dim: i64, tag: &str) -> Option<Shape> {
        if at > self.rank() || self.rank() == MAX_RANK {
            return None;
        }
        let mut res = self;
        res.rank += 1;
        for i in (at..self.rank()).rev() {
            res.dims[i + 1] = self.dims[i];
            res.tags[i + 1] = self.tags[i];
            res.mesh_axes[i + 1] = self.mesh_axes[i];
        }
        res.dims[at] = dim;
        res.mesh_axes[at] = None;
        res.tags[at] = if tag.is_empty() {
            None
        } else {
            Some(Tag::new(tag))
        };
        Some(res)
    }

    /// This shape without `axis`; `None` if no such axis.
    pub fn remove_axis(self, axis: impl Into<AxisRef>) -> Option<Shape> {
        let at = self.axis(axis)?;
        let mut res = self;
        for i in at..self.rank() - 1 {
            res.dims[i] = self.dims[i + 1];
            res.tags[i] = self.tags[i + 1];
            res.mesh_axes[i] = self.mesh_axes[i + 1];
        }
        res.rank -= 1;
        res.dims[res.rank()] = 0;
        res.tags[res.rank()] = None;
        res.mesh_axes[res.rank()] = None;
        Some(res)
    }

    /// This shape with `axis` split into `parts` (`(tag, size)` pairs whose
    /// sizes multiply to its size; one size may be [`Size::Auto`]).
    pub fn split_axis(self, axis: impl Into<AxisRef>, parts: &[(&str, Size)]) -> Option<Shape> {
        let at = self.axis(axis)?;
        let total = self.dims[at];
        let known: i64 = parts
            .iter()
            .filter_map(|p| match p.1 {
                Size::Exactly(n) => Some(n),
                Size::Auto => None,
            })
            .product();
        let n_auto = parts.iter().filter(|p| p.1 == Size::Auto).count();
        let mut res = self.remove_axis(at)?;
        if self.rank() - 1 + parts.len() > MAX_RANK || n_auto > 1 || known <= 0 {
            return None;
        }
        if (n_auto == 0 && known != total) || (n_auto == 1 && total % known != 0) {
            return None;
        }
        for (k, (tag, d)) in parts.iter().enumerate() {
            let d = match *d {
                Size::Exactly(n) => n,
                Size::Auto => total / known,
            };
            res = res.insert_axis(at + k, d, tag)?;
        }
        Some(res)
    }

    /// This shape with the adjacent axes `axes` (in order, consecutive)
    /// merged into one axis tagged `tag` (untagged if empty).
    pub fn merge_axes(self, axes: &[AxisRef], tag: &str) -> Option<Shape> {
        let idx: Vec<usize> = axes.iter().map(|&a| self.axis(a)).collect::<Option<_>>()?;
        let first = *idx.first()?;
        if idx.iter().enumerate().any(|(k, &i)| i != first + k) {
            return None;
        }
        let size: i64 = idx.iter().map(|&i| self.dims[i]).product();
        let mut res = self;
        for _ in &idx {
            res = res.remove_axis(first)?;
        }
        res.insert_axis(first, size, tag)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    /// `{b=2, d=3, f32}`: tagged axes as `tag=size`, untagged as the size;
    /// an axis split along mesh axis `m` ends with `@m` (`b=8@0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for i in 0..self.rank() {
            match self.tags[i] {
                Some(t) => write!(f, "{t}={}", self.dims[i])?,
                None => write!(f, "{}", self.dims[i])?,
            }
            if let Some(m) = self.mesh_axes[i] {
                write!(f, "@{m}")?;
            }
            f.write_str(", ")?;
        }
        write!(f, "{}}}", self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn construct_and_query() {
        let s = Shape::tagged(DType::F32, &[("b", 2), ("s", 3), ("d", 4)]);
        expect!["{b=2, s=3, d=4, f32}"].assert_eq(&s.to_string());
        assert_eq!(s.dim("s"), Some(3));
        assert_eq!(s.dim(-1), Some(4));
        assert_eq!(s.axis("d"), Some(2));
        assert_eq!(s.axis("x"), None);
        assert_eq!(s.count(), 24);
        assert_eq!(s.byte_size(), 96);
        assert_eq!(Tag::new("b"), s.tag(0).unwrap());
    }

    #[test]
    fn edit_axes() {
        let s = Shape::tagged(DType::F32, &[("b", 2), ("d", 6)]);
        let split = s
            .split_axis("d", &[("h", Size::Exactly(2)), ("hd", Size::Auto)])
            .unwrap();
        expect!["{b=2, h=2, hd=3, f32}"].assert_eq(&split.to_string());
        let merged = split.merge_axes(&["h".into(), "hd".into()], "d").unwrap();
        assert_eq!(merged, s);
        expect!["{b=2, x=6, f32}"].assert_eq(&s.rename("d", "x").unwrap().to_string());
        expect!["{b=2, 1, d=6, f32}"].assert_eq(&s.insert_axis(1, 1, "").unwrap().to_string());
        expect!["{d=6, f32}"].assert_eq(&s.remove_axis("b").unwrap().to_string());
        assert_eq!(
            s.split_axis("d", &[("h", Size::Exactly(4)), ("hd", Size::Auto)]),
            None
        );
        assert_eq!(s.merge_axes(&["d".into(), "b".into()], "x"), None);
    }
}
