//! `weir_slow(x)`: returns `x`, after sleeping a fixed time per row. Not a
//! built-in: benchmarks and tests register it to make an operator slow and
//! so create backpressure (as Flink users do with a sleeping map function).

use std::sync::Arc;
use std::time::Duration;

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion_common::Result as DFResult;
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

/// The function; see the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Slow {
    signature: Signature,
    nanos_per_row: u64,
}

impl Slow {
    /// `weir_slow(BIGINT)`, sleeping `per_row` for each row of a batch.
    pub fn udf(per_row: Duration) -> ScalarUDF {
        ScalarUDF::from(Slow {
            signature: Signature::exact(vec![DataType::Int64], Volatility::Volatile),
            nanos_per_row: per_row.as_nanos() as u64,
        })
    }
}

impl ScalarUDFImpl for Slow {
    fn name(&self) -> &str {
        "weir_slow"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let values: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?;
        std::thread::sleep(Duration::from_nanos(self.nanos_per_row * args.number_rows as u64));
        Ok(ColumnarValue::Array(Arc::clone(&values[0])))
    }
}
