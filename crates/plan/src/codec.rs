//! Plans as data: physical expressions, aggregate functions, schemas and
//! scalars to and from serializable values, so a job graph can be written
//! out and its operators built again from it (in another process, later).
//!
//! Schemas and scalars travel as Arrow IPC (field metadata, such as time
//! attributes, included), hex-encoded; functions by name, looked up in the
//! session's [`FunctionLookup`] when decoded. Only the expressions weir's
//! planner makes are known: anything else is an error naming its type, not
//! a silently different plan.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use datafusion_common::ScalarValue;
use datafusion_common::config::ConfigOptions;
use datafusion_expr::{AggregateUDF, Operator, ScalarUDF};
use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion_physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal,
    NegativeExpr, NotExpr, TryCastExpr,
};
use datafusion_physical_expr::{PhysicalExpr, PhysicalSortExpr, ScalarFunctionExpr};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The functions a plan's expressions call, by name (a session's or a
/// process's registry).
pub trait FunctionLookup {
    /// A scalar function by name.
    fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>>;
    /// An aggregate function by name.
    fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>>;
}

/// What decoding needs: the functions by name, and the session's settings
/// that functions read (its time zone).
pub struct DecodeContext<'a> {
    /// The session's functions.
    pub functions: &'a dyn FunctionLookup,
    /// Settings handed to scalar functions.
    pub config: Arc<ConfigOptions>,
}

impl<'a> DecodeContext<'a> {
    /// A context over `functions`, with functions seeing `time_zone`.
    pub fn new(functions: &'a dyn FunctionLookup, time_zone: &str) -> Self {
        let mut config = ConfigOptions::new();
        config.execution.time_zone = Some(time_zone.to_string());
        DecodeContext {
            functions,
            config: Arc::new(config),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>> {
    let bad = || Error::State(format!("a serialized plan holds bad hex data: {text:.40}"));
    if !text.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// One batch (or just a schema) as an Arrow IPC stream.
fn ipc_bytes(schema: &Schema, batch: Option<&RecordBatch>) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, schema)?;
    if let Some(batch) = batch {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(bytes)
}

/// A schema, with its fields' metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaData(String);

impl SchemaData {
    /// Encodes `schema`.
    pub fn encode(schema: &Schema) -> Result<Self> {
        Ok(SchemaData(hex(&ipc_bytes(schema, None)?)))
    }

    /// The schema again.
    pub fn decode(&self) -> Result<SchemaRef> {
        let bytes = unhex(&self.0)?;
        Ok(StreamReader::try_new(std::io::Cursor::new(bytes), None)?.schema())
    }
}

/// Record batches (VALUES rows), as one IPC stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchesData(String);

impl BatchesData {
    /// Encodes `batches` of `schema`.
    pub fn encode(schema: &Schema, batches: &[RecordBatch]) -> Result<Self> {
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, schema)?;
        for batch in batches {
            writer.write(batch)?;
        }
        writer.finish()?;
        drop(writer);
        Ok(BatchesData(hex(&bytes)))
    }

    /// The batches again.
    pub fn decode(&self) -> Result<Vec<RecordBatch>> {
        let bytes = unhex(&self.0)?;
        let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
    }
}

/// A field (type, nullability, metadata).
fn encode_field(field: &Field) -> Result<SchemaData> {
    SchemaData::encode(&Schema::new(vec![field.clone()]))
}

fn decode_field(data: &SchemaData) -> Result<FieldRef> {
    let schema = data.decode()?;
    schema
        .fields()
        .first()
        .cloned()
        .ok_or_else(|| Error::State("a serialized plan holds an empty field".into()))
}

/// A scalar value, as a one-row column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalarData(String);

impl ScalarData {
    fn encode(value: &ScalarValue) -> Result<Self> {
        let array: ArrayRef = value.to_array()?;
        let schema = Arc::new(Schema::new(vec![Field::new(
            "v",
            array.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![array])?;
        Ok(ScalarData(hex(&ipc_bytes(&schema, Some(&batch))?)))
    }

    fn decode(&self) -> Result<ScalarValue> {
        let bytes = unhex(&self.0)?;
        let mut reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        let batch = reader
            .next()
            .ok_or_else(|| Error::State("a serialized plan holds an empty scalar".into()))??;
        Ok(ScalarValue::try_from_array(batch.column(0), 0)?)
    }
}

/// A physical expression as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExprNode {
    /// Column `index` of the input, named `name`.
    Column {
        /// Its name.
        name: String,
        /// Its position.
        index: usize,
    },
    /// A constant, with its field (metadata may matter).
    Literal {
        /// The value.
        value: ScalarData,
        /// Its field.
        field: SchemaData,
    },
    /// `left op right`.
    Binary {
        /// Left operand.
        left: Box<ExprNode>,
        /// The operator, as SQL writes it (`+`, `AND`, `IS DISTINCT FROM`, ...).
        op: String,
        /// Right operand.
        right: Box<ExprNode>,
    },
    /// `CAST(expr AS field's type)`.
    Cast {
        /// What is cast.
        expr: Box<ExprNode>,
        /// The result field (type, nullability, metadata) over the input.
        field: SchemaData,
        /// A bad value becomes NULL (otherwise it is an error).
        safe: bool,
    },
    /// `TRY_CAST(expr AS type)`.
    TryCast {
        /// What is cast.
        expr: Box<ExprNode>,
        /// The target field.
        field: SchemaData,
    },
    /// `expr IS NULL`.
    IsNull(Box<ExprNode>),
    /// `expr IS NOT NULL`.
    IsNotNull(Box<ExprNode>),
    /// `NOT expr`.
    Not(Box<ExprNode>),
    /// `-expr`.
    Negative(Box<ExprNode>),
    /// `CASE [base] WHEN .. THEN .. [ELSE ..] END`.
    Case {
        /// The operand of a simple CASE.
        base: Option<Box<ExprNode>>,
        /// The branches.
        when_then: Vec<(ExprNode, ExprNode)>,
        /// The ELSE value.
        otherwise: Option<Box<ExprNode>>,
    },
    /// `expr [NOT] IN (list)`.
    InList {
        /// The value tested.
        expr: Box<ExprNode>,
        /// The list.
        list: Vec<ExprNode>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `expr [NOT] [I]LIKE pattern`.
    Like {
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
        /// The value tested.
        expr: Box<ExprNode>,
        /// The pattern.
        pattern: Box<ExprNode>,
    },
    /// A scalar function, by name.
    Function {
        /// The function's name in the registry.
        name: String,
        /// Its arguments.
        args: Vec<ExprNode>,
        /// Its result field.
        field: SchemaData,
    },
}

/// The SQL text of a binary operator and back (DataFusion's `Display`).
fn operator(text: &str) -> Result<Operator> {
    use Operator::*;
    let all = [
        Eq,
        NotEq,
        Lt,
        LtEq,
        Gt,
        GtEq,
        Plus,
        Minus,
        Multiply,
        Divide,
        Modulo,
        And,
        Or,
        IsDistinctFrom,
        IsNotDistinctFrom,
        RegexMatch,
        RegexIMatch,
        RegexNotMatch,
        RegexNotIMatch,
        LikeMatch,
        ILikeMatch,
        NotLikeMatch,
        NotILikeMatch,
        BitwiseAnd,
        BitwiseOr,
        BitwiseXor,
        BitwiseShiftRight,
        BitwiseShiftLeft,
        StringConcat,
        AtArrow,
        ArrowAt,
        Arrow,
        LongArrow,
        HashArrow,
        HashLongArrow,
        AtAt,
        IntegerDivide,
        HashMinus,
        AtQuestion,
        Question,
        QuestionAnd,
        QuestionPipe,
    ];
    all.into_iter()
        .find(|op| op.to_string() == text)
        .ok_or_else(|| Error::State(format!("a serialized plan holds an unknown operator '{text}'")))
}

fn boxed(expr: &Arc<dyn PhysicalExpr>, input: &Schema) -> Result<Box<ExprNode>> {
    Ok(Box::new(encode_expr(expr, input)?))
}

/// `expr` (evaluated over `input`) as data.
pub fn encode_expr(expr: &Arc<dyn PhysicalExpr>, input: &Schema) -> Result<ExprNode> {
    let any: &dyn PhysicalExpr = expr.as_ref();
    if let Some(c) = any.downcast_ref::<Column>() {
        return Ok(ExprNode::Column {
            name: c.name().to_string(),
            index: c.index(),
        });
    }
    if let Some(l) = any.downcast_ref::<Literal>() {
        return Ok(ExprNode::Literal {
            value: ScalarData::encode(l.value())?,
            field: encode_field(expr.return_field(input)?.as_ref())?,
        });
    }
    if let Some(b) = any.downcast_ref::<BinaryExpr>() {
        return Ok(ExprNode::Binary {
            left: boxed(b.left(), input)?,
            op: b.op().to_string(),
            right: boxed(b.right(), input)?,
        });
    }
    if let Some(c) = any.downcast_ref::<CastExpr>() {
        return Ok(ExprNode::Cast {
            expr: boxed(c.expr(), input)?,
            field: encode_field(expr.return_field(input)?.as_ref())?,
            safe: c.cast_options().safe,
        });
    }
    if let Some(c) = any.downcast_ref::<TryCastExpr>() {
        return Ok(ExprNode::TryCast {
            expr: boxed(c.expr(), input)?,
            field: encode_field(expr.return_field(input)?.as_ref())?,
        });
    }
    if let Some(e) = any.downcast_ref::<IsNullExpr>() {
        return Ok(ExprNode::IsNull(boxed(e.arg(), input)?));
    }
    if let Some(e) = any.downcast_ref::<IsNotNullExpr>() {
        return Ok(ExprNode::IsNotNull(boxed(e.arg(), input)?));
    }
    if let Some(e) = any.downcast_ref::<NotExpr>() {
        return Ok(ExprNode::Not(boxed(e.arg(), input)?));
    }
    if let Some(e) = any.downcast_ref::<NegativeExpr>() {
        return Ok(ExprNode::Negative(boxed(e.arg(), input)?));
    }
    if let Some(c) = any.downcast_ref::<CaseExpr>() {
        return Ok(ExprNode::Case {
            base: c.expr().map(|e| boxed(e, input)).transpose()?,
            when_then: c
                .when_then_expr()
                .iter()
                .map(|(w, t)| Ok((encode_expr(w, input)?, encode_expr(t, input)?)))
                .collect::<Result<_>>()?,
            otherwise: c.else_expr().map(|e| boxed(e, input)).transpose()?,
        });
    }
    if let Some(i) = any.downcast_ref::<InListExpr>() {
        return Ok(ExprNode::InList {
            expr: boxed(i.expr(), input)?,
            list: i
                .list()
                .iter()
                .map(|e| encode_expr(e, input))
                .collect::<Result<_>>()?,
            negated: i.negated(),
        });
    }
    if let Some(l) = any.downcast_ref::<LikeExpr>() {
        return Ok(ExprNode::Like {
            negated: l.negated(),
            case_insensitive: l.case_insensitive(),
            expr: boxed(l.expr(), input)?,
            pattern: boxed(l.pattern(), input)?,
        });
    }
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>() {
        return Ok(ExprNode::Function {
            name: f.fun().name().to_string(),
            args: f
                .args()
                .iter()
                .map(|e| encode_expr(e, input))
                .collect::<Result<_>>()?,
            field: encode_field(expr.return_field(input)?.as_ref())?,
        });
    }
    Err(Error::Internal(format!(
        "expression {expr} cannot be serialized (unknown kind of physical expression)"
    )))
}

fn decode_boxed(node: &ExprNode, input: &Schema, ctx: &DecodeContext) -> Result<Arc<dyn PhysicalExpr>> {
    decode_expr(node, input, ctx)
}

/// The physical expression `node` describes, over `input`.
pub fn decode_expr(node: &ExprNode, input: &Schema, ctx: &DecodeContext) -> Result<Arc<dyn PhysicalExpr>> {
    let expr: Arc<dyn PhysicalExpr> = match node {
        ExprNode::Column { name, index } => Arc::new(Column::new(name, *index)),
        ExprNode::Literal { value, field } => {
            let field = decode_field(field)?;
            let metadata = (!field.metadata().is_empty())
                .then(|| datafusion_common::metadata::FieldMetadata::from(field.metadata()));
            Arc::new(Literal::new_with_metadata(value.decode()?, metadata))
        }
        ExprNode::Binary { left, op, right } => Arc::new(BinaryExpr::new(
            decode_boxed(left, input, ctx)?,
            operator(op)?,
            decode_boxed(right, input, ctx)?,
        )),
        ExprNode::Cast { expr, field, safe } => {
            // The result field as it was over this input: the same types,
            // nullability and metadata as the original cast gave.
            let options = arrow::compute::CastOptions {
                safe: *safe,
                ..datafusion_common::format::DEFAULT_CAST_OPTIONS
            };
            Arc::new(CastExpr::new_with_target_field(
                decode_boxed(expr, input, ctx)?,
                decode_field(field)?,
                Some(options),
            ))
        }
        ExprNode::TryCast { expr, field } => Arc::new(TryCastExpr::new(
            decode_boxed(expr, input, ctx)?,
            decode_field(field)?.data_type().clone(),
        )),
        ExprNode::IsNull(e) => Arc::new(IsNullExpr::new(decode_boxed(e, input, ctx)?)),
        ExprNode::IsNotNull(e) => Arc::new(IsNotNullExpr::new(decode_boxed(e, input, ctx)?)),
        ExprNode::Not(e) => Arc::new(NotExpr::new(decode_boxed(e, input, ctx)?)),
        ExprNode::Negative(e) => Arc::new(NegativeExpr::new(decode_boxed(e, input, ctx)?)),
        ExprNode::Case {
            base,
            when_then,
            otherwise,
        } => Arc::new(CaseExpr::try_new(
            base.as_ref().map(|e| decode_boxed(e, input, ctx)).transpose()?,
            when_then
                .iter()
                .map(|(w, t)| Ok((decode_expr(w, input, ctx)?, decode_expr(t, input, ctx)?)))
                .collect::<Result<_>>()?,
            otherwise
                .as_ref()
                .map(|e| decode_boxed(e, input, ctx))
                .transpose()?,
        )?),
        ExprNode::InList { expr, list, negated } => Arc::new(InListExpr::try_new(
            decode_boxed(expr, input, ctx)?,
            list.iter()
                .map(|e| decode_expr(e, input, ctx))
                .collect::<Result<_>>()?,
            *negated,
            input,
        )?),
        ExprNode::Like {
            negated,
            case_insensitive,
            expr,
            pattern,
        } => Arc::new(LikeExpr::new(
            *negated,
            *case_insensitive,
            decode_boxed(expr, input, ctx)?,
            decode_boxed(pattern, input, ctx)?,
        )),
        ExprNode::Function { name, args, field } => {
            let fun = ctx.functions.scalar(name).ok_or_else(|| {
                Error::State(format!(
                    "a serialized plan calls function '{name}', which this session does not have"
                ))
            })?;
            Arc::new(ScalarFunctionExpr::new(
                name,
                fun,
                args.iter()
                    .map(|e| decode_expr(e, input, ctx))
                    .collect::<Result<_>>()?,
                decode_field(field)?,
                ctx.config.clone(),
            ))
        }
    };
    Ok(expr)
}

/// Expressions over one input as data.
pub fn encode_exprs(exprs: &[Arc<dyn PhysicalExpr>], input: &Schema) -> Result<Vec<ExprNode>> {
    exprs.iter().map(|e| encode_expr(e, input)).collect()
}

/// [`encode_exprs`] back.
pub fn decode_exprs(
    nodes: &[ExprNode],
    input: &Schema,
    ctx: &DecodeContext,
) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
    nodes.iter().map(|n| decode_expr(n, input, ctx)).collect()
}

/// An aggregate function call (`SUM(DISTINCT x ORDER BY y)`) as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateNode {
    /// The function's name in the registry.
    pub function: String,
    /// Its arguments, over the aggregation's input.
    pub args: Vec<ExprNode>,
    /// `ORDER BY` within the call: expression, descending, nulls first.
    pub order_by: Vec<(ExprNode, bool, bool)>,
    /// `DISTINCT`.
    pub distinct: bool,
    /// `IGNORE NULLS`.
    pub ignore_nulls: bool,
    /// Its output name.
    pub alias: String,
    /// How EXPLAIN shows it.
    pub human_display: Option<String>,
}

/// `aggregate` (over `input`) as data.
pub fn encode_aggregate(aggregate: &AggregateFunctionExpr, input: &Schema) -> Result<AggregateNode> {
    Ok(AggregateNode {
        function: aggregate.fun().name().to_string(),
        args: encode_exprs(&aggregate.expressions(), input)?,
        order_by: aggregate
            .order_bys()
            .iter()
            .map(|s| {
                Ok((
                    encode_expr(&s.expr, input)?,
                    s.options.descending,
                    s.options.nulls_first,
                ))
            })
            .collect::<Result<_>>()?,
        distinct: aggregate.is_distinct(),
        ignore_nulls: aggregate.ignore_nulls(),
        alias: aggregate.name().to_string(),
        human_display: aggregate.human_display().map(str::to_string),
    })
}

/// [`encode_aggregate`] back, over `input`.
pub fn decode_aggregate(
    node: &AggregateNode,
    input: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<AggregateFunctionExpr> {
    let fun = ctx.functions.aggregate(&node.function).ok_or_else(|| {
        Error::State(format!(
            "a serialized plan calls aggregate '{}', which this session does not have",
            node.function
        ))
    })?;
    let order_by = node
        .order_by
        .iter()
        .map(|(e, descending, nulls_first)| {
            Ok(PhysicalSortExpr {
                expr: decode_expr(e, input, ctx)?,
                options: arrow::compute::SortOptions {
                    descending: *descending,
                    nulls_first: *nulls_first,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut builder = AggregateExprBuilder::new(fun, decode_exprs(&node.args, input, ctx)?)
        .schema(input.clone())
        .alias(&node.alias)
        .with_distinct(node.distinct)
        .with_ignore_nulls(node.ignore_nulls)
        .order_by(order_by);
    if let Some(display) = &node.human_display {
        builder = builder.human_display(display);
    }
    Ok(builder.build()?)
}

/// Sort keys over `input` as data: each expression with `descending` and
/// `nulls_first`.
pub fn encode_sort_keys(
    keys: &[(Arc<dyn PhysicalExpr>, arrow::compute::SortOptions)],
    input: &Schema,
) -> Result<Vec<(ExprNode, bool, bool)>> {
    keys.iter()
        .map(|(e, o)| Ok((encode_expr(e, input)?, o.descending, o.nulls_first)))
        .collect()
}

/// [`encode_sort_keys`] back, over `input`.
pub fn decode_sort_keys(
    keys: &[(ExprNode, bool, bool)],
    input: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Vec<(Arc<dyn PhysicalExpr>, arrow::compute::SortOptions)>> {
    keys.iter()
        .map(|(e, descending, nulls_first)| {
            let options = arrow::compute::SortOptions {
                descending: *descending,
                nulls_first: *nulls_first,
            };
            Ok((decode_expr(e, input, ctx)?, options))
        })
        .collect()
}

/// A data type's text (Arrow's), for specs that need only the type.
pub fn type_text(data_type: &DataType) -> String {
    data_type.to_string()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};
    use datafusion_common::DFSchema;
    use datafusion_expr::execution_props::ExecutionProps;
    use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
    use datafusion_expr::{Expr, col, in_list, lit, when};
    use datafusion_physical_expr::create_physical_expr;

    use super::*;

    /// DataFusion's own functions, as a session's registry would hold them.
    struct Builtins;

    impl FunctionLookup for Builtins {
        fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
            datafusion_functions::all_default_functions()
                .into_iter()
                .find(|f| f.name() == name)
        }

        fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>> {
            datafusion_functions_aggregate::all_default_aggregate_functions()
                .into_iter()
                .find(|f| f.name() == name)
        }
    }

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(-3), Some(40)])),
                Arc::new(StringArray::from(vec![Some("ab"), Some("xy"), None, Some("Ab")])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn every_kind_of_expression_evaluates_the_same_after_a_json_round_trip() {
        let functions = Builtins;
        let upper = functions.scalar("upper").unwrap();
        let exprs: Vec<Expr> = vec![
            col("a") + lit(1i64) * lit(2i64),
            col("a").gt(lit(0i64)).and(col("s").is_not_null()),
            col("a").is_null().or(col("a").not_eq(lit(3i64))),
            Expr::Negative(Box::new(col("a"))),
            Expr::Not(Box::new(col("a").lt_eq(lit(1i64)))),
            Expr::Cast(datafusion_expr::Cast::new(Box::new(col("a")), DataType::Utf8)),
            Expr::TryCast(datafusion_expr::TryCast::new(Box::new(col("s")), DataType::Int32)),
            when(col("a").gt(lit(10i64)), lit("big"))
                .otherwise(lit("small"))
                .unwrap(),
            in_list(col("a"), vec![lit(1i64), lit(40i64)], true),
            col("s").like(lit("a%")),
            col("s").ilike(lit("a%")),
            upper.call(vec![col("s")]),
            lit(ScalarValue::Decimal128(Some(12345), 10, 2)),
        ];
        let data = batch();
        let df_schema = DFSchema::try_from(data.schema().as_ref().clone()).unwrap();
        let ctx = DecodeContext::new(&functions, "UTC");
        for expr in exprs {
            let physical = create_physical_expr(
                &expr,
                &df_schema,
                &ExecutionProps::new(),
                &PhysicalPlanningContext::default(),
            )
            .unwrap();
            let node = encode_expr(&physical, &data.schema()).unwrap();
            let json = serde_json::to_string(&node).unwrap();
            let back: ExprNode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, node);
            let decoded = decode_expr(&back, &data.schema(), &ctx).unwrap();
            let before = physical.evaluate(&data).unwrap().into_array(4).unwrap();
            let after = decoded.evaluate(&data).unwrap().into_array(4).unwrap();
            assert_eq!(before.as_ref(), after.as_ref(), "{expr}");
            assert_eq!(encode_expr(&decoded, &data.schema()).unwrap(), node, "{expr}");
        }
    }

    #[test]
    fn an_unknown_kind_of_expression_is_an_error_naming_it() {
        let unknown: Arc<dyn PhysicalExpr> = Arc::new(datafusion_physical_expr::expressions::NoOp::new());
        let err = encode_expr(&unknown, &Schema::empty()).unwrap_err().to_string();
        assert!(err.contains("cannot be serialized"), "{err}");
    }

    #[test]
    fn an_aggregate_call_survives_a_round_trip() {
        let functions = Builtins;
        let schema = batch().schema();
        let count = functions.aggregate("count").unwrap();
        let built = AggregateExprBuilder::new(count, vec![Arc::new(Column::new("a", 0))])
            .schema(schema.clone())
            .alias("n")
            .with_distinct(true)
            .build()
            .unwrap();
        let node = encode_aggregate(&built, &schema).unwrap();
        let back = decode_aggregate(&node, &schema, &DecodeContext::new(&functions, "UTC")).unwrap();
        assert_eq!(encode_aggregate(&back, &schema).unwrap(), node);
        assert!(back.is_distinct());
        assert_eq!(back.field(), built.field());
    }
}
