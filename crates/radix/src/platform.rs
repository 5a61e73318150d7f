//! `Platform`: a PJRT plugin and client to compile for and run on.

use std::sync::Arc;

use radix_pjrt::provision::Target;
use radix_pjrt::{Client, Device, Distributed, KeyValueStore, OpenOptions, StoreError};

use crate::sharding::Mesh;
use crate::{Error, Result};

/// Where programs compile and run: a loaded plugin, its client and the
/// devices radix uses (the first one, or a [`Mesh`] of several; see
/// [`Platform::with_mesh`]). Cheap to clone (shared).
#[derive(Clone)]
pub struct Platform {
    inner: Arc<Inner>,
    mesh: Option<Mesh>,
}

struct Inner {
    target: Target,
    client: Client,
}

impl Platform {
    /// An accelerator whose plugin is already on this machine and which shows
    /// a device, else the CPU (whose plugin is fetched on first use).
    pub fn auto() -> Result<Platform> {
        Platform::open(&OpenOptions::AUTO)
    }

    /// The host CPU.
    pub fn cpu() -> Result<Platform> {
        Platform::open(&OpenOptions::target(Target::Cpu))
    }

    /// A client opened as `options` say (see [`radix_pjrt::open`]), e.g.
    /// `Platform::open(&OpenOptions { cpu_devices: Some(4), ..OpenOptions::target(Target::Cpu) })`.
    /// In a launched MPI job of several processes, a CUDA client is one
    /// node per rank ([`OpenOptions::distributed`] unless the caller set
    /// it): node id the rank, node count the job's size, and the job's
    /// key-value store ([`radix_mpi::kv_store`]), so every rank must open
    /// it. The CPU plugin gets none of it.
    pub fn open(options: &OpenOptions<'_>) -> Result<Platform> {
        let job = match options.distributed {
            Some(_) => None,
            None => mpi_job(options)?,
        };
        let options = OpenOptions {
            distributed: options.distributed.or(job.as_ref()),
            ..*options
        };
        Ok(Platform::from_client(radix_pjrt::open(&options)?))
    }

    /// A platform over an existing client.
    pub fn from_client(client: Client) -> Platform {
        let name = client.platform_name().to_ascii_lowercase();
        let target = Target::ALL
            .into_iter()
            .find(|t| name.contains(t.name()) || (*t == Target::Cuda && name.contains("gpu")))
            .unwrap_or(Target::Cpu);
        Platform {
            inner: Arc::new(Inner { target, client }),
            mesh: None,
        }
    }

    /// This platform with programs partitioned over `mesh`: they compile
    /// for `mesh.n_devices()` SPMD partitions on the first that many
    /// devices, and buffers hold one block per device. An error if the
    /// client has fewer devices (on the CPU, see
    /// [`OpenOptions::cpu_devices`]). A mesh of one device is no mesh.
    pub fn with_mesh(&self, mesh: Mesh) -> Result<Platform> {
        if mesh.spans_processes() {
            // XLA inserts the collectives of an automatic partitioning
            // itself, and the CPU plugin's cannot leave the process.
            return Err(Error::Sharding(format!(
                "a mesh {:?} spanning processes: XLA's partitioner cannot cross processes on this plugin; \
                 give the platform each process's devices (Mesh::local) and split the process axis with radix::shard_map",
                mesh.dims()
            )));
        }
        let have = self.client().addressable_devices().len();
        if mesh.n_devices() > have {
            return Err(Error::Sharding(format!(
                "a mesh {:?} needs {} devices, the platform has {have}",
                mesh.dims(),
                mesh.n_devices()
            )));
        }
        Ok(Platform {
            inner: self.inner.clone(),
            mesh: (mesh.n_devices() > 1).then_some(mesh),
        })
    }

    /// The mesh programs are partitioned over, if any.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }

    /// The devices programs run on: one per partition of the mesh, else
    /// the first addressable one.
    pub fn devices(&self) -> &[Device] {
        let n = self.mesh.as_ref().map_or(1, Mesh::n_devices);
        &self.inner.client.addressable_devices()[..n]
    }

    /// What the plugin runs on.
    pub fn target(&self) -> Target {
        self.inner.target
    }

    /// The PJRT client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The first device programs run on (the first addressable one).
    pub fn device(&self) -> &Device {
        &self.inner.client.addressable_devices()[0]
    }
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Platform({:?}, {}",
            self.inner.target,
            self.inner.client.platform_name()
        )?;
        if let Some(m) = &self.mesh {
            write!(f, ", mesh {:?}", m.dims())?;
        }
        f.write_str(")")
    }
}

/// This process's node of a CUDA client across its MPI job, if it is one
/// of several processes of a launched job and `options` may open CUDA's
/// plugin (named, or the automatic choice on a machine with NVIDIA devices).
fn mpi_job(options: &OpenOptions<'_>) -> Result<Option<Distributed>> {
    let may_be_cuda = match options.target {
        Some(target) => target == Target::Cuda,
        None => options.plugin.is_none() && Target::Cuda.has_device_files(),
    };
    if !may_be_cuda || !radix_mpi::launched() {
        return Ok(None);
    }
    let mpi = |e: radix_mpi::Error| Error::Mpi(e.to_string());
    let world = radix_mpi::world().map_err(mpi)?;
    if world.size() < 2 {
        return Ok(None);
    }
    let store = MpiStore(radix_mpi::kv_store().map_err(mpi)?);
    Ok(Some(Distributed::new(
        world.rank(),
        world.size(),
        Arc::new(store),
    )?))
}

/// The MPI job's key-value store, as a PJRT client reaches it.
struct MpiStore(&'static radix_mpi::KvStore);

impl KeyValueStore for MpiStore {
    fn get(&self, key: &[u8], timeout: std::time::Duration) -> Result<Vec<u8>, StoreError> {
        self.0.get(key, timeout).map_err(store_error)
    }

    fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.try_get(key).map_err(store_error)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.0.put(key, value).map_err(store_error)
    }
}

fn store_error(e: radix_mpi::Error) -> StoreError {
    match e {
        radix_mpi::Error::KeyNotPut { .. } => StoreError::NotPut(e.to_string()),
        e => StoreError::Unavailable(e.to_string()),
    }
}
