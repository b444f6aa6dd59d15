//! `LISTAGG(x [, separator])`, Flink's string aggregate, which DataFusion lacks.
//!
//! The non-null values in arrival order joined by the separator (`,` when
//! there is none; it must be a literal); NULL when there are no values.
//! Windowed and batch aggregation use this function's accumulator; the
//! non-windowed GROUP BY, which must retract, has its own
//! (`accumulator::ListAgg`).

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{Result, ScalarValue, plan_err};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::Literal;

/// The separator when the call gives none, as Flink's.
pub const DEFAULT_SEPARATOR: &str = ",";

/// The `listagg` aggregate function.
pub fn listagg_udaf() -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::from(ListAgg {
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

/// The separator of a LISTAGG call from its argument expressions.
pub fn separator(args: &[Arc<dyn PhysicalExpr>]) -> Result<String> {
    let Some(expr) = args.get(1) else {
        return Ok(DEFAULT_SEPARATOR.to_string());
    };
    let Some(literal) = expr.downcast_ref::<Literal>() else {
        return plan_err!("LISTAGG's separator must be a literal, not {expr}");
    };
    match literal.value().try_as_str() {
        Some(s) => Ok(s.unwrap_or_default().to_string()),
        None => plan_err!("LISTAGG's separator must be a string, not {}", literal.value()),
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ListAgg {
    signature: Signature,
}

fn is_string(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

impl AggregateUDFImpl for ListAgg {
    fn name(&self) -> &str {
        "listagg"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.is_empty() || arg_types.len() > 2 || !arg_types.iter().all(is_string) {
            let given: Vec<String> = arg_types.iter().map(|t| format!("<{t}>")).collect();
            return plan_err!(
                "Cannot apply 'LISTAGG' to arguments of type 'LISTAGG({})'. \
                 Supported form(s): 'LISTAGG(<STRING>)', 'LISTAGG(<STRING>, <STRING>)'",
                given.join(", ")
            );
        }
        Ok(vec![DataType::Utf8; arg_types.len()])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct || !args.order_bys.is_empty() {
            return plan_err!("LISTAGG(DISTINCT ...) and LISTAGG(... ORDER BY ...) are not supported");
        }
        Ok(Box::new(Joined {
            separator: separator(args.exprs)?,
            joined: None,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[joined]", args.name),
            DataType::Utf8,
            true,
        ))])
    }
}

/// The values so far, joined.
#[derive(Debug)]
struct Joined {
    separator: String,
    joined: Option<String>,
}

impl Joined {
    fn push_all(&mut self, values: &ArrayRef) -> Result<()> {
        let values = arrow::compute::cast(values, &DataType::Utf8)?;
        for value in values.as_string::<i32>().iter().flatten() {
            match &mut self.joined {
                Some(joined) => {
                    joined.push_str(&self.separator);
                    joined.push_str(value);
                }
                None => self.joined = Some(value.to_string()),
            }
        }
        Ok(())
    }
}

impl Accumulator for Joined {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.push_all(&values[0])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Utf8(self.joined.clone()))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.separator.capacity() + self.joined.as_ref().map_or(0, String::capacity)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Utf8(self.joined.clone())])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.push_all(&states[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    fn joined(separator: &str, batches: &[&[Option<&str>]]) -> ScalarValue {
        let mut acc = Joined {
            separator: separator.into(),
            joined: None,
        };
        for batch in batches {
            let array: ArrayRef = Arc::new(StringArray::from(batch.to_vec()));
            acc.update_batch(&[array]).unwrap();
        }
        acc.evaluate().unwrap()
    }

    #[test]
    fn listagg_joins_values_in_arrival_order_skipping_nulls() {
        let got = joined(",", &[&[Some("a"), None, Some("b")], &[Some("c")]]);
        assert_eq!(got, ScalarValue::Utf8(Some("a,b,c".into())));
    }

    #[test]
    fn listagg_of_no_values_is_null() {
        assert_eq!(joined(";", &[&[None]]), ScalarValue::Utf8(None));
    }

    #[test]
    fn listagg_refuses_a_number_with_flinks_message() {
        let err = listagg_udaf().coerce_types(&[DataType::Int32]).unwrap_err();
        assert!(err.to_string().contains("Cannot apply 'LISTAGG'"), "{err}");
    }
}
