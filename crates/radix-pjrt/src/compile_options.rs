//! XLA compile options: the wire messages (`xla/pjrt/proto/compile_options.proto`,
//! only the fields radix sets, declared with `prost` derive) and the safe
//! [`CompileOptions`] builder that never produces bytes the plugin aborts on.

use std::collections::BTreeMap;

use prost::Message;

use crate::{Error, Result};

/// `xla.CompileOptionsProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompileOptionsProto {
    /// Field 3.
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// Field 7: XLA debug options by flag name. A `BTreeMap`, so the bytes
    /// are deterministic (they feed the executable cache key).
    #[prost(btree_map = "string, message", tag = "7")]
    pub env_option_overrides: BTreeMap<String, OptionOverrideProto>,
}

/// `xla.ExecutableBuildOptionsProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecutableBuildOptionsProto {
    /// Field 1; -1 means unset.
    #[prost(int64, tag = "1")]
    pub device_ordinal: i64,
    /// Field 4; must be at least 1.
    #[prost(int64, tag = "4")]
    pub num_replicas: i64,
    /// Field 5; must be at least 1.
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    /// Field 6.
    #[prost(bool, tag = "6")]
    pub use_spmd_partitioning: bool,
    /// Field 9.
    #[prost(message, optional, tag = "9")]
    pub device_assignment: Option<DeviceAssignmentProto>,
    /// Field 19: partition with Shardy (`sdy.*`) instead of GSPMD.
    #[prost(bool, tag = "19")]
    pub use_shardy_partitioner: bool,
}

/// `xla.DeviceAssignmentProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceAssignmentProto {
    /// Field 1.
    #[prost(int32, tag = "1")]
    pub replica_count: i32,
    /// Field 2: the number of partitions.
    #[prost(int32, tag = "2")]
    pub computation_count: i32,
    /// Field 3: one entry per partition.
    #[prost(message, repeated, tag = "3")]
    pub computation_devices: Vec<ComputationDevice>,
}

/// `xla.DeviceAssignmentProto.ComputationDevice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ComputationDevice {
    /// Field 1: the device id of each replica of this partition.
    #[prost(int64, repeated, tag = "1")]
    pub replica_device_ids: Vec<i64>,
}

/// `xla.OptionOverrideProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionOverrideProto {
    /// The value.
    #[prost(oneof = "OptionOverrideValue", tags = "1, 2, 3, 4")]
    pub value: Option<OptionOverrideValue>,
}

/// The `value` oneof of `xla.OptionOverrideProto`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum OptionOverrideValue {
    /// Field 1.
    #[prost(string, tag = "1")]
    StringField(String),
    /// Field 2.
    #[prost(bool, tag = "2")]
    BoolField(bool),
    /// Field 3.
    #[prost(int64, tag = "3")]
    IntField(i64),
    /// Field 4.
    #[prost(double, tag = "4")]
    DoubleField(f64),
}

/// The value of an XLA debug option override (`env_option_overrides`).
#[derive(Debug, Clone, PartialEq)]
pub enum OverrideValue {
    /// A string flag, e.g. `xla_dump_to`.
    String(String),
    /// A boolean flag, e.g. `xla_gpu_enable_triton_gemm`.
    Bool(bool),
    /// An integer flag.
    Int(i64),
    /// A floating-point flag.
    Double(f64),
}

/// How to compile a program. [`CompileOptions::to_bytes`] validates it, so
/// the plugin never sees options it would abort on.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// Replicas (data-parallel copies); at least 1.
    pub num_replicas: usize,
    /// Partitions (SPMD shards); at least 1.
    pub num_partitions: usize,
    /// Partition the program with SPMD according to its `mhlo.sharding`s.
    pub spmd: bool,
    /// Use the Shardy partitioner (for `sdy.*` shardings).
    pub use_shardy: bool,
    /// Device ids, row-major `[replica][partition]`
    /// (`num_replicas * num_partitions` entries); `None` lets the plugin choose.
    pub device_assignment: Option<Vec<i64>>,
    /// XLA debug options by flag name, e.g. `("xla_dump_to", String(dir))`.
    pub env_overrides: Vec<(String, OverrideValue)>,
}

impl Default for CompileOptions {
    /// One replica, one partition, no SPMD, the plugin's device choice.
    fn default() -> CompileOptions {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
            spmd: false,
            use_shardy: false,
            device_assignment: None,
            env_overrides: Vec::new(),
        }
    }
}

impl CompileOptions {
    /// The validated proto message.
    pub fn to_proto(&self) -> Result<CompileOptionsProto> {
        let invalid = |m: String| Err(Error::InvalidArgument(m));
        if self.num_replicas < 1 || self.num_partitions < 1 {
            return invalid(format!(
                "compile options need at least one replica and one partition, got {} and {}",
                self.num_replicas, self.num_partitions
            ));
        }
        let too_big = |n: usize| i32::try_from(n).is_err();
        if too_big(self.num_replicas) || too_big(self.num_partitions) {
            return invalid("num_replicas and num_partitions must fit in an i32".into());
        }
        let device_assignment = match &self.device_assignment {
            None => None,
            Some(ids) => {
                let expected = self.num_replicas * self.num_partitions;
                if ids.len() != expected {
                    return invalid(format!(
                        "device assignment has {} ids, {} replicas x {} partitions need {expected}",
                        ids.len(),
                        self.num_replicas,
                        self.num_partitions
                    ));
                }
                if let Some(id) = ids.iter().find(|&&id| id < 0) {
                    return invalid(format!("device assignment names device {id}"));
                }
                let computation_devices = (0..self.num_partitions)
                    .map(|p| ComputationDevice {
                        replica_device_ids: (0..self.num_replicas)
                            .map(|r| ids[r * self.num_partitions + p])
                            .collect(),
                    })
                    .collect();
                Some(DeviceAssignmentProto {
                    replica_count: self.num_replicas as i32,
                    computation_count: self.num_partitions as i32,
                    computation_devices,
                })
            }
        };
        let mut env_option_overrides = BTreeMap::new();
        for (name, value) in &self.env_overrides {
            if name.is_empty() {
                return invalid("an env option override has an empty name".into());
            }
            let value = match value.clone() {
                OverrideValue::String(s) => OptionOverrideValue::StringField(s),
                OverrideValue::Bool(b) => OptionOverrideValue::BoolField(b),
                OverrideValue::Int(i) => OptionOverrideValue::IntField(i),
                OverrideValue::Double(d) => OptionOverrideValue::DoubleField(d),
            };
            if env_option_overrides
                .insert(name.clone(), OptionOverrideProto { value: Some(value) })
                .is_some()
            {
                return invalid(format!("env option override {name} is given twice"));
            }
        }
        Ok(CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: self.num_replicas as i64,
                num_partitions: self.num_partitions as i64,
                use_spmd_partitioning: self.spmd,
                device_assignment,
                use_shardy_partitioner: self.use_shardy,
            }),
            env_option_overrides,
        })
    }

    /// The serialized `CompileOptionsProto`; always has at least one replica
    /// and one partition.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.to_proto()?.encode_to_vec())
    }
}

/// Checks serialized compile options from elsewhere (a cache, a user) for
/// what would abort the plugin: undecodable bytes, or fewer than one replica
/// or partition.
pub fn validate_bytes(bytes: &[u8]) -> Result<()> {
    let proto = CompileOptionsProto::decode(bytes)
        .map_err(|e| Error::InvalidArgument(format!("compile options do not decode: {e}")))?;
    match proto.executable_build_options {
        Some(b) if b.num_replicas >= 1 && b.num_partitions >= 1 => Ok(()),
        _ => Err(Error::InvalidArgument(
            "compile options need num_replicas >= 1 and num_partitions >= 1".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_bytes() {
        let bytes = CompileOptions::default().to_bytes().unwrap();
        // executable_build_options { device_ordinal: -1, num_replicas: 1, num_partitions: 1 }
        let mut expected = vec![0x1a, 0x0f, 0x08];
        expected.extend([0xff; 9]);
        expected.extend([0x01, 0x20, 0x01, 0x28, 0x01]);
        assert_eq!(bytes, expected);
        validate_bytes(&bytes).unwrap();
    }

    #[test]
    fn zero_replicas_or_partitions_is_an_error() {
        for (r, p) in [(0, 1), (1, 0), (0, 0)] {
            let o = CompileOptions {
                num_replicas: r,
                num_partitions: p,
                ..CompileOptions::default()
            };
            assert!(matches!(o.to_bytes(), Err(Error::InvalidArgument(_))));
        }
        assert!(validate_bytes(&[]).is_err());
        assert!(validate_bytes(&[0x1a, 0x02, 0x20, 0x01]).is_err());
        assert!(validate_bytes(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn device_assignment_layout() {
        let o = CompileOptions {
            num_replicas: 2,
            num_partitions: 2,
            spmd: true,
            device_assignment: Some(vec![0, 1, 2, 3]),
            ..CompileOptions::default()
        };
        let p = o.to_proto().unwrap().executable_build_options.unwrap();
        let da = p.device_assignment.unwrap();
        assert_eq!(da.computation_devices[0].replica_device_ids, vec![0, 2]);
        assert_eq!(da.computation_devices[1].replica_device_ids, vec![1, 3]);
        let bad = CompileOptions {
            device_assignment: Some(vec![0, 1, 2]),
            ..o
        };
        assert!(bad.to_bytes().is_err());
    }

    #[test]
    fn overrides_are_sorted_and_unique() {
        let o = CompileOptions {
            env_overrides: vec![
                ("xla_b".into(), OverrideValue::Bool(true)),
                ("xla_a".into(), OverrideValue::String("x".into())),
            ],
            ..CompileOptions::default()
        };
        let swapped = CompileOptions {
            env_overrides: o.env_overrides.iter().rev().cloned().collect(),
            ..CompileOptions::default()
        };
        assert_eq!(o.to_bytes().unwrap(), swapped.to_bytes().unwrap());
        let dup = CompileOptions {
            env_overrides: vec![
                ("x".into(), OverrideValue::Int(1)),
                ("x".into(), OverrideValue::Int(2)),
            ],
            ..CompileOptions::default()
        };
        assert!(dup.to_bytes().is_err());
    }
}
