//! A census's records: who holds the live tensors (each holder by its path and what it is), and
//! which objects grew where memory grew outside the tensors.

use serde::{Deserialize, Serialize};

use super::model::Origin;

/// Live tensors grouped by who holds them, counted by the probe at a step's start, at the end
/// or at an out-of-memory error (since 1.2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Census {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// Who sent it.
    #[serde(flatten)]
    pub origin: Origin,
    /// The step it was taken at.
    #[serde(default)]
    pub step: Option<u64>,
    /// Why: `step`, `end` or `oom`.
    pub reason: String,
    /// The largest holders, largest first.
    #[serde(default)]
    pub holders: Vec<Holder>,
    /// Holders left out, each no larger than `cutoff_bytes`.
    #[serde(default)]
    pub more_holders: u64,
    /// The size of the largest holder left out (0: none left out).
    #[serde(default)]
    pub cutoff_bytes: u64,
    /// Tensors reached (parameters, gradients and optimizer state left out).
    #[serde(default)]
    pub tensors: u64,
    /// Their bytes, each storage once.
    #[serde(default)]
    pub bytes: u64,
    /// Tensors alive that the walk did not reach (held from C++, or by objects it does not walk).
    #[serde(default)]
    pub unreached_tensors: u64,
    /// Their bytes not counted elsewhere.
    #[serde(default)]
    pub unreached_bytes: u64,
    /// Whether the unreached tensors were looked for (only when the job dies: it looks at every
    /// object); `false`: the two numbers above are 0 because nobody counted.
    #[serde(default)]
    pub unreached_counted: bool,
    /// Python objects looked at.
    #[serde(default)]
    pub objects: u64,
    /// Objects that errored when looked at, skipped.
    #[serde(default)]
    pub skipped: u64,
    /// Whether the walk stopped at its time limit (`objects` says how far it got).
    #[serde(default)]
    pub truncated: bool,
    /// What the census cost the job, nanoseconds.
    #[serde(default)]
    pub cost_ns: u64,
    /// Objects that are not tensors: what grew since they were counted (at a step census after
    /// which memory grew outside the tensors), said at the last census (at the job's end or its
    /// out-of-memory error; since 1.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grown: Option<ObjectGrowth>,
}

/// The objects Python's cycle collector tracks, by type, that grew between the step census that
/// counted them and this one, and the module-level containers that hold objects of a type that
/// grew (since 1.7).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectGrowth {
    /// The step of the census that counted them first.
    #[serde(default)]
    pub since_step: Option<u64>,
    /// The types whose objects grew most, most first.
    #[serde(default)]
    pub types: Vec<TypeCount>,
    /// The containers that hold most of what grew, most first.
    #[serde(default)]
    pub containers: Vec<ObjectContainer>,
}

/// How many objects of a type there were when first counted and at this census.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeCount {
    /// The type, with its module: `matplotlib.figure.Figure`.
    #[serde(rename = "type")]
    pub name: String,
    /// Objects when first counted.
    pub before: u64,
    /// Objects at this one.
    pub now: u64,
}

/// A global, or an attribute of a class, of any module, whose items are of a type that grew.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectContainer {
    /// Its path: `matplotlib._pylab_helpers.Gcf.figs`, `__main__.figures`.
    pub name: String,
    /// What it is: "OrderedDict, a class attribute of Gcf".
    #[serde(default)]
    pub what: String,
    /// Its items now.
    pub items: u64,
    /// The type of most of its last items: `matplotlib.backend_bases.FigureManagerBase`.
    pub holds: String,
    /// How many objects of that type were added since they were first counted (anywhere).
    pub grew: u64,
}

/// Who holds tensors: a name the user would write, and what it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Identifies the holder across the censuses of one process while it lives (the container's
    /// identity; its name may differ from census to census); empty: the name identifies it.
    #[serde(default)]
    pub key: String,
    /// The path: `__main__.all_losses`, `__main__.model.feature_cache`, `hook.outputs`.
    pub name: String,
    /// What the name is: "list, a global of __main__", "an attribute of Net", "a closure
    /// variable of hook(), a forward hook on __main__.model".
    #[serde(default)]
    pub what: String,
    /// The CUDA device of these tensors; `None` for the host.
    #[serde(default)]
    pub device: Option<u32>,
    /// Tensors held.
    #[serde(default)]
    pub tensors: u64,
    /// Their bytes, each storage once.
    #[serde(default)]
    pub bytes: u64,
    /// Bytes of the tensors their autograd graphs saved (kept alive with them).
    #[serde(default)]
    pub graph_bytes: u64,
    /// Tensors that keep their autograd graph (`grad_fn` set).
    #[serde(default)]
    pub with_graph: u64,
    /// The container's length, when the holder is a container.
    #[serde(default)]
    pub items: u64,
}

impl Holder {
    /// Whether two censuses' holders are the same one.
    pub fn same_as(&self, other: &Holder) -> bool {
        self.is(&other.key, &other.name, other.device)
    }

    /// Whether this is the holder with that key (else, without keys, that name) on that device.
    pub fn is(&self, key: &str, name: &str, device: Option<u32>) -> bool {
        self.device == device
            && if self.key.is_empty() || key.is_empty() {
                self.name == name
            } else {
                self.key == key
            }
    }

    /// What it keeps alive: its tensors and their graphs.
    pub fn held_bytes(&self) -> u64 {
        self.bytes + self.graph_bytes
    }
}
