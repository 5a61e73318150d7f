//! `Buffer`: an array on a device, or split over a mesh of devices, with
//! its [`Shape`] (tags and sharding included).

use std::sync::Arc;

use crate::literal::Literal;
use crate::sharding::{Mesh, place_block, slice_block};
use crate::{Element, Error, Platform, Result, Shape};

/// An array on a device, with its shape and tags. On a platform with a
/// [`Mesh`] it is one block per device: the block of each split axis the
/// device's mesh position names, the whole array where nothing is split.
///
/// A `Buffer` is a shared handle: cloning it shares the device memory, so
/// one set of weights serves every executable. The memory is freed when the
/// last clone is dropped, or taken by a call that donates it (then every
/// clone reads as spent: [`Error::Donated`]).
#[derive(Debug, Clone)]
pub struct Buffer {
    shards: Arc<[radix_pjrt::Buffer]>,
    shape: Shape,
    mesh: Option<Arc<Mesh>>,
}

/// One of the client's uploads: bytes, element type, dims, device.
type Upload = fn(
    &radix_pjrt::Client,
    &[u8],
    radix_pjrt::ElementType,
    &[i64],
    &radix_pjrt::Device,
) -> radix_pjrt::Result<radix_pjrt::Buffer>;

impl Buffer {
    /// Uploads `values` as an array of `shape` (whose dtype must be `T`'s).
    pub fn from_slice<T: Element>(
        platform: &Platform,
        values: &[T],
        shape: Shape,
    ) -> Result<Buffer> {
        if shape.dtype() != T::DTYPE || shape.count() != values.len() {
            return Err(Error::Host(format!(
                "{} values of {} for {shape}",
                values.len(),
                T::DTYPE
            )));
        }
        // SAFETY: every `Element` is plain old data without padding; we only read its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Buffer::from_bytes(platform, bytes, shape)
    }

    /// Uploads a literal.
    pub fn from_literal(platform: &Platform, literal: &Literal) -> Result<Buffer> {
        Buffer::from_bytes(platform, &literal.to_bytes(), literal.shape())
    }

    /// Uploads the little-endian dense `bytes` of an array of `shape`. On a
    /// platform with a mesh, each device gets its block (see
    /// [`Mesh::block`]), and a split axis that does not divide is
    /// [`Error::Sharding`]; without a mesh, sharding is ignored.
    pub fn from_bytes(platform: &Platform, bytes: &[u8], shape: Shape) -> Result<Buffer> {
        Buffer::upload(platform, bytes, shape, radix_pjrt::Client::buffer_from_host)
    }

    /// [`Buffer::from_bytes`] for a model's weights, which live as long as
    /// the model: on the CPU plugin, smaller ones share chunks of huge pages
    /// ([`radix_pjrt::Client::weights_from_host`]).
    pub fn weights_from_bytes(platform: &Platform, bytes: &[u8], shape: Shape) -> Result<Buffer> {
        Buffer::upload(
            platform,
            bytes,
            shape,
            radix_pjrt::Client::weights_from_host,
        )
    }

    /// An array of `shape` whose every byte is zero (zeros of any float
    /// or integer type): on the CPU plugin written in place
    /// ([`radix_pjrt::Client::zeros`]), elsewhere and over a mesh uploaded
    /// from the host.
    pub fn zeros(platform: &Platform, shape: Shape) -> Result<Buffer> {
        if platform.mesh().is_some() {
            return Buffer::from_bytes(platform, &vec![0u8; shape.byte_size()], shape);
        }
        let ty = crate::dtype::element_type(shape.dtype());
        let shard = platform
            .client()
            .zeros(ty, shape.dims(), platform.device())?;
        Ok(Buffer::from_shards(vec![shard], shape, None))
    }

    /// [`Buffer::weights_from_bytes`] of `host`'s bytes, letting go of
    /// their pages of a file's memory map as they are copied
    /// ([`radix_pjrt::Client::weights_from_host_releasing`],
    /// [`HostTensor::release_pages_in`]) where the buffer is one device's,
    /// and after the upload where it is split over a mesh. Measured on a
    /// 2-core AMD EPYC (Linux 6.18), `radix generate` of 30 tokens peaked
    /// at 687 MiB on Gemma 3 270M Q4_K_M with the map's pages kept until
    /// the model was loaded (llama-completion: 424 MiB), 624 MiB with each
    /// weight's released after its upload (its 178 MB embedding resident
    /// twice during its own), 468 MiB so; SmolLM2 Q4_1 287, 213 and 213.
    ///
    /// [`HostTensor::release_pages_in`]: crate::io::HostTensor::release_pages_in
    pub(crate) fn weights_from_host(
        platform: &Platform,
        host: &crate::io::HostTensor,
        shape: Shape,
    ) -> Result<Buffer> {
        let bytes = host.bytes();
        if platform.mesh().is_some() || bytes.len() != shape.byte_size() {
            let buffer = Buffer::weights_from_bytes(platform, bytes, shape);
            host.release_pages();
            return buffer;
        }
        let shard = platform.client().weights_from_host_releasing(
            bytes,
            crate::dtype::element_type(shape.dtype()),
            shape.dims(),
            platform.device(),
            &|copied| host.release_pages_in(copied),
        )?;
        Ok(Buffer::from_shards(vec![shard], shape, None))
    }

    /// [`Buffer::weights_from_host`] of `host`'s `format` blocks (Q8_0,
    /// Q4_0, Q4_1 or Q5_0, rows of `cols` elements) with their rows split on the way
    /// ([`Layout::Split`](crate::quant::Layout::Split),
    /// [`radix_quant::split_rows`]): a few megabytes of rows at a time,
    /// each range of the file's map let go once split into the buffer, so
    /// the weight is never resident twice (where the buffer is one
    /// device's; over a mesh, split in host memory first).
    pub(crate) fn weights_split(
        platform: &Platform,
        host: &crate::io::HostTensor,
        shape: Shape,
        (format, cols): (radix_quant::Format, usize),
    ) -> Result<Buffer> {
        let bytes = host.bytes();
        let host_err = |e: radix_quant::Error| Error::Host(e.to_string());
        let row_bytes = format.row_bytes(cols).map_err(host_err)?;
        radix_quant::RowLayout::Split
            .check(format)
            .map_err(host_err)?;
        if bytes.len() != shape.byte_size() || !bytes.len().is_multiple_of(row_bytes.max(1)) {
            return Err(Error::Host(format!(
                "{} bytes of {} rows of {cols} for {shape}",
                bytes.len(),
                format.name()
            )));
        }
        // Whole rows (checked above), so splitting cannot fail.
        let failed = std::sync::Mutex::new(None);
        let split = |range: std::ops::Range<usize>, out: &mut [u8]| {
            if let Err(e) = radix_quant::split_rows(format, cols, &bytes[range.clone()], out) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
            host.release_pages_in(range);
        };
        let buffer = if platform.mesh().is_some() {
            let mut all = vec![0u8; bytes.len()];
            split(0..bytes.len(), &mut all);
            Buffer::weights_from_bytes(platform, &all, shape)
        } else {
            let ty = crate::dtype::element_type(shape.dtype());
            let shard = platform.client().weights_filled(
                (bytes.len(), row_bytes.max(1)),
                ty,
                shape.dims(),
                platform.device(),
                &split,
            )?;
            Ok(Buffer::from_shards(vec![shard], shape, None))
        };
        if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(host_err(e));
        }
        buffer
    }

    /// `bytes` of `shape` uploaded by `put` (to each device its block).
    fn upload(platform: &Platform, bytes: &[u8], shape: Shape, put: Upload) -> Result<Buffer> {
        if bytes.len() != shape.byte_size() {
            return Err(Error::Host(format!("{} bytes for {shape}", bytes.len())));
        }
        let mesh = platform.mesh();
        let upload = |bytes: &[u8], dims: &[i64], device| {
            put(
                platform.client(),
                bytes,
                crate::dtype::element_type(shape.dtype()),
                dims,
                device,
            )
        };
        let shards = match mesh {
            None => vec![upload(bytes, shape.dims(), platform.device())?],
            Some(mesh) => {
                mesh.sharding_of(&shape).map_err(Error::Sharding)?;
                let size = shape.dtype().size_in_bytes();
                let mut shards = vec![];
                for (d, device) in platform.devices().iter().enumerate() {
                    let (start, block) = mesh.block(&shape, d);
                    let part = slice_block(bytes, shape.dims(), size, &start, &block);
                    shards.push(upload(&part, &block, device)?);
                }
                shards
            }
        };
        Ok(Buffer {
            shards: shards.into(),
            shape,
            mesh: mesh.cloned().map(Arc::new),
        })
    }

    /// A buffer of `shape` from its per-device blocks (one per device of
    /// `mesh`, or a single one without a mesh).
    pub(crate) fn from_shards(
        shards: Vec<radix_pjrt::Buffer>,
        shape: Shape,
        mesh: Option<Mesh>,
    ) -> Buffer {
        Buffer {
            shards: shards.into(),
            shape,
            mesh: mesh.map(Arc::new),
        }
    }

    /// The shape, with tags and sharding.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The underlying PJRT buffer on the first device (its block of the
    /// array if the buffer is split).
    pub fn raw(&self) -> &radix_pjrt::Buffer {
        &self.shards[0]
    }

    /// The PJRT buffers, one per device of the platform's mesh.
    pub fn shards(&self) -> &[radix_pjrt::Buffer] {
        &self.shards
    }

    /// The mesh the buffer is spread over, if any.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_deref()
    }

    /// The dense little-endian bytes of the whole array, gathered from the
    /// devices' blocks.
    fn host_bytes(&self) -> Result<Vec<u8>> {
        let Some(mesh) = self.mesh.as_deref().filter(|_| self.shape.is_sharded()) else {
            let got = self.shards[0].to_host_vec()?;
            // The download's length is the device's word, the shape radix's:
            // a mismatch is an error, never a read past the download.
            if got.len() != self.shape.byte_size() {
                return Err(Error::Host(format!(
                    "the device returned {} bytes for {}",
                    got.len(),
                    self.shape
                )));
            }
            return Ok(got);
        };
        let size = self.shape.dtype().size_in_bytes();
        let mut data = vec![0u8; self.shape.byte_size()];
        for (d, shard) in self.shards.iter().enumerate() {
            let (start, block) = mesh.block(&self.shape, d);
            let got = shard.to_host_vec()?;
            if got.len() != block.iter().product::<i64>() as usize * size {
                return Err(Error::Sharding(format!(
                    "device {d} holds {} bytes of {}, its block is {block:?}",
                    got.len(),
                    self.shape
                )));
            }
            place_block(&mut data, self.shape.dims(), size, &start, &block, &got);
        }
        Ok(data)
    }

    /// Downloads the values as `T`s (which must be the dtype's type).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.shape.dtype() {
            return Err(Error::Host(format!(
                "reading {} as {}",
                self.shape,
                T::DTYPE
            )));
        }
        let bytes = self.host_bytes()?;
        let n = self.shape.count();
        let mut res: Vec<T> = Vec::with_capacity(n);
        // SAFETY: `bytes` holds `n` dense little-endian `T`s (checked dtype,
        // and `host_bytes` checked the length);
        // every bit pattern the device writes is a valid `T` (bools are 0 or 1).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                res.as_mut_ptr().cast::<u8>(),
                n * size_of::<T>(),
            );
            res.set_len(n);
        }
        Ok(res)
    }

    /// Downloads the values as a literal.
    pub fn to_literal(&self) -> Result<Literal> {
        Ok(Literal::from_bytes(self.shape, &self.host_bytes()?))
    }
}
