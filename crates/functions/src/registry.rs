//! The functions SQL can call: DataFusion's, plus Flink's where they differ.
//!
//! Names are looked up case-insensitively. Flink built-ins that DataFusion lacks
//! are DataFusion UDFs in [`super::flink_functions`]; where Flink and DataFusion
//! disagree about a result type (`SUM`, `AVG` of integers), the Flink-typed
//! version replaces DataFusion's (see [`super::flink_aggregates`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_expr::{AggregateUDF, ScalarUDF};

use crate::{flink_aggregates, flink_functions, listagg};

/// Scalar, aggregate and window functions by lower-case name.
#[derive(Debug, Clone)]
pub struct FunctionRegistry {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    windows: HashMap<String, Arc<datafusion_expr::WindowUDF>>,
}

impl FunctionRegistry {
    /// DataFusion's functions with Flink's built-ins; `time_zone` is the session's.
    pub fn new(time_zone: &str) -> Self {
        let mut registry = FunctionRegistry {
            scalars: HashMap::new(),
            aggregates: HashMap::new(),
            windows: HashMap::new(),
        };
        for f in datafusion_functions::all_default_functions()
            .into_iter()
            .chain(datafusion_functions_nested::all_default_nested_functions())
        {
            registry.register_scalar(f);
        }
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            registry.register_aggregate(f);
        }
        for f in flink_functions::flink_scalar_functions(time_zone) {
            registry.register_scalar(f);
        }
        for f in flink_aggregates::flink_typed_aggregates() {
            registry.register_aggregate(f);
        }
        registry.register_aggregate(listagg::listagg_udaf());
        for f in datafusion_functions_window::all_default_window_functions() {
            registry.windows.insert(f.name().to_lowercase(), f.clone());
            for alias in f.aliases() {
                registry.windows.insert(alias.to_lowercase(), f.clone());
            }
        }
        registry
    }

    /// A window function (`ROW_NUMBER`, `RANK`, ...) by name.
    pub fn window(&self, name: &str) -> Option<Arc<datafusion_expr::WindowUDF>> {
        self.windows.get(&name.to_lowercase()).cloned()
    }

    /// Names of all window functions.
    pub fn window_names(&self) -> Vec<String> {
        self.windows.keys().cloned().collect()
    }

    /// Adds (or replaces) a scalar function under its name and aliases.
    pub fn register_scalar(&mut self, f: Arc<ScalarUDF>) {
        for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
            self.scalars.insert(name.to_lowercase(), f.clone());
        }
    }

    /// Adds (or replaces) an aggregate function under its name and aliases.
    pub fn register_aggregate(&mut self, f: Arc<AggregateUDF>) {
        for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
            self.aggregates.insert(name.to_lowercase(), f.clone());
        }
    }

    /// A scalar function by name.
    pub fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalars.get(&name.to_lowercase()).cloned()
    }

    /// An aggregate function by name.
    pub fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.aggregates.get(&name.to_lowercase()).cloned()
    }

    /// Names of all scalar functions.
    pub fn scalar_names(&self) -> Vec<String> {
        self.scalars.keys().cloned().collect()
    }

    /// Names of all aggregate functions.
    pub fn aggregate_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }
}

impl weir_plan::codec::FunctionLookup for FunctionRegistry {
    fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        FunctionRegistry::scalar(self, name)
    }

    fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        FunctionRegistry::aggregate(self, name)
    }
}
