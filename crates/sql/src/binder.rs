//! Binding: SQL statements to typed DataFusion logical plans.
//!
//! The [`Binder`] is DataFusion's `ContextProvider` over the session's catalog and
//! functions. It runs `SqlToRel`, then DataFusion's type coercion and a chosen set
//! of optimizer rules that are sound for streams (projection pruning, filter
//! push-down, constant folding). Errors keep DataFusion's source spans, so they
//! name the line and column.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DFSchema, DataFusionError, Result as DFResult, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner, RelationPlanner, TypePlanner};
use datafusion_expr::{AggregateUDF, Expr, HigherOrderUDF, LogicalPlan, ScalarUDF, TableSource, WindowUDF};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_optimizer::optimizer::{Optimizer, OptimizerContext, OptimizerRule};
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use sqlparser::ast::{self, TimezoneInfo};

use crate::catalog::{Catalog, CatalogTable};
use crate::dialect::table_factor;
use crate::group_window::rewrite_group_windows;
use crate::naming::name_select_items;
use crate::qualify::qualify_window_filters;
use crate::window_tvf::FlinkRelationPlanner;
use crate::{Error, Result};
use weir_common::error::Position;
use weir_common::types::{unit_for_precision, with_zone};
use weir_functions::registry::FunctionRegistry;

/// Schema qualifier under which a table's physical columns alone can be scanned.
pub const PHYSICAL_SCHEMA: &str = "__weir_physical";

/// A catalog table as DataFusion sees it.
#[derive(Debug)]
pub struct CatalogTableSource {
    /// The table.
    pub table: Arc<CatalogTable>,
    /// The schema the binder exposes (physical only, or all columns).
    pub schema: SchemaRef,
    /// True when only the physical columns are exposed.
    pub physical_only: bool,
}

impl TableSource for CatalogTableSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Maps Flink type names in `CAST` and literals to Arrow types.
#[derive(Debug)]
struct FlinkTypePlanner {
    zone: String,
}

impl TypePlanner for FlinkTypePlanner {
    fn plan_type_field(&self, sql_type: &ast::DataType) -> DFResult<Option<FieldRef>> {
        let data_type = match sql_type {
            ast::DataType::Timestamp(precision, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
                DataType::Timestamp(unit_for_precision(precision.unwrap_or(6)), None)
            }
            ast::DataType::Custom(name, modifiers) => {
                let precision = modifiers.first().and_then(|m| m.parse().ok()).unwrap_or(6);
                match name.to_string().to_ascii_uppercase().as_str() {
                    "TIMESTAMP_LTZ" => {
                        DataType::Timestamp(unit_for_precision(precision), Some(self.zone.as_str().into()))
                    }
                    "BYTES" => DataType::Binary,
                    "STRING" => DataType::Utf8,
                    _ => return Ok(None),
                }
            }
            ast::DataType::String(_) => DataType::Utf8,
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(Field::new("", data_type, true))))
    }
}

/// Binds statements against a catalog snapshot.
pub struct Binder {
    catalog: Arc<Catalog>,
    functions: Arc<FunctionRegistry>,
    options: ConfigOptions,
    zone: String,
    relation_planners: Vec<Arc<dyn RelationPlanner>>,
    /// Planners for syntax that maps to functions (`EXTRACT`, `a.b`, `x[1]`, ...).
    expr_planners: Vec<Arc<dyn ExprPlanner>>,
    type_planner: Arc<dyn TypePlanner>,
    insert_target: Option<String>,
}

impl Binder {
    /// A binder for a session whose `TIMESTAMP_LTZ` zone is `zone`.
    pub fn new(catalog: Arc<Catalog>, functions: Arc<FunctionRegistry>, zone: &str) -> Self {
        let mut options = ConfigOptions::new();
        options.execution.time_zone = Some(zone.to_string());
        options.sql_parser.enable_ident_normalization = false;
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.parse_float_as_decimal = true;
        options.sql_parser.collect_spans = true;
        Binder {
            relation_planners: vec![Arc::new(FlinkRelationPlanner::new(catalog.clone()))],
            expr_planners: vec![
                Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
                Arc::new(datafusion_functions_nested::planner::NestedFunctionPlanner),
                Arc::new(datafusion_functions_nested::planner::FieldAccessPlanner),
                Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
                Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
                Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
            ],
            type_planner: Arc::new(FlinkTypePlanner {
                zone: zone.to_string(),
            }),
            catalog,
            functions,
            options,
            zone: zone.to_string(),
            insert_target: None,
        }
    }

    /// The session's functions.
    pub fn functions(&self) -> &FunctionRegistry {
        &self.functions
    }

    /// The session zone.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    fn sql_to_rel(&self) -> SqlToRel<'_, Self> {
        SqlToRel::new_with_options(self, ParserOptions::from(&self.options.sql_parser))
    }

    /// Rewrites Flink's syntax DataFusion does not know (legacy group windows)
    /// and names select items as Flink does. Views are stored prepared.
    pub fn prepare_query(query: &mut ast::Query) -> Result<()> {
        rewrite_group_windows(query)?;
        qualify_window_filters(query);
        name_select_items(query);
        Ok(())
    }

    /// Binds a query to an analyzed and optimized logical plan.
    pub fn bind_query(&self, query: ast::Query) -> Result<LogicalPlan> {
        let plan = self.plan_query(query)?;
        self.optimize(plan)
    }

    /// Binds a query to a logical plan as SQL gives it, before analysis and
    /// optimization ([`Binder::finish`]): a Table API value's start.
    pub fn plan_query(&self, mut query: ast::Query) -> Result<LogicalPlan> {
        Self::prepare_query(&mut query)?;
        self.sql_to_rel()
            .sql_statement_to_plan(ast::Statement::Query(Box::new(query)))
            .map_err(bind_error)
    }

    /// Analyzes (type coercion) and optimizes a plan built by the Table API
    /// as a bound query is.
    pub fn finish(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        self.optimize(plan)
    }

    /// Binds `INSERT INTO table query`.
    pub fn bind_insert(&self, statement: ast::Statement) -> Result<LogicalPlan> {
        let ast::Statement::Insert(mut insert) = statement else {
            return Err(Error::Internal("bind_insert expects an INSERT".into()));
        };
        if insert.overwrite {
            return Err(Error::sql("INSERT OVERWRITE is not supported in streaming mode"));
        }
        let target = match &insert.table {
            ast::TableObject::TableName(name) => super::parser::resolve_object_name(name)
                .ok_or_else(|| Error::sql(format!("unknown table {name}")))?,
            other => return Err(Error::sql(format!("cannot insert into {other}"))),
        };
        if self.catalog.view(&target).is_some() {
            return Err(Error::sql(format!("'{target}' is a view; INSERT needs a table")));
        }
        if let Some(source) = &mut insert.source {
            Self::prepare_query(source)?;
            self.assign_rows_by_position(&target, &insert.columns, source)?;
        }
        let binder = Binder {
            insert_target: Some(target),
            relation_planners: self.relation_planners.clone(),
            expr_planners: self.expr_planners.clone(),
            type_planner: self.type_planner.clone(),
            catalog: self.catalog.clone(),
            functions: self.functions.clone(),
            options: self.options.clone(),
            zone: self.zone.clone(),
        };
        let plan = binder
            .sql_to_rel()
            .sql_statement_to_plan(ast::Statement::Insert(insert))
            .map_err(bind_error)?;
        binder.optimize(plan)
    }

    /// Flink assigns a `ROW` value to a `ROW` column by position, whatever
    /// its fields are called (`ROW(id, 'x')` into `ROW<a BIGINT, b STRING>`);
    /// DataFusion's cast matches struct fields by name. So the source's
    /// struct columns whose names differ from the target's are rebuilt with
    /// the target's names: `SELECT named_struct('a', c0['EXPR$0'], ...) FROM
    /// (source) AS __weir_insert(c0, ...)`. Anything else is left to the
    /// usual INSERT planning (and its errors).
    fn assign_rows_by_position(
        &self,
        target: &str,
        columns: &[ast::ObjectName],
        source: &mut Box<ast::Query>,
    ) -> Result<()> {
        let Some(table) = self.catalog.table(target) else {
            return Ok(());
        };
        let physical = table.connector_table().write_schema();
        let targets: Vec<DataType> = if columns.is_empty() {
            physical.fields().iter().map(|f| f.data_type().clone()).collect()
        } else {
            let found: Option<Vec<DataType>> = columns
                .iter()
                .map(|c| {
                    let name = c.0.last()?.as_ident()?.value.clone();
                    physical
                        .field_with_name(&name)
                        .ok()
                        .map(|f| f.data_type().clone())
                })
                .collect();
            let Some(found) = found else { return Ok(()) };
            found
        };
        if !targets.iter().any(|t| matches!(t, DataType::Struct(_))) {
            return Ok(());
        }
        let bound = self.bind_query((**source).clone())?;
        let fields = bound.schema().fields();
        if fields.len() != targets.len() {
            return Ok(());
        }
        let mut renamed = false;
        let items: Vec<String> = fields
            .iter()
            .zip(&targets)
            .enumerate()
            .map(|(i, (field, to))| {
                let column = format!("`__weir_insert`.`c{i}`");
                match struct_by_position(&column, field.data_type(), to) {
                    Some(rebuilt) => {
                        renamed = true;
                        rebuilt
                    }
                    None => column,
                }
            })
            .collect();
        if !renamed {
            return Ok(());
        }
        let aliases: Vec<String> = (0..fields.len()).map(|i| format!("c{i}")).collect();
        let text = format!(
            "SELECT {} FROM ({source}) AS __weir_insert({})",
            items.join(", "),
            aliases.join(", ")
        );
        let dialect = super::dialect::FlinkDialect;
        let rewritten = sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_query())
            .map_err(|e| Error::Internal(format!("positional ROW assignment: {e}: {text}")))?;
        *source = rewritten;
        Ok(())
    }

    /// Binds `SELECT exprs FROM table` (the table's full or physical columns) and
    /// returns the typed projection expressions with the schema they are over.
    pub fn bind_table_exprs(
        &self,
        table: &str,
        physical: bool,
        exprs: Vec<ast::Expr>,
    ) -> Result<(Vec<Expr>, Arc<DFSchema>)> {
        let mut name = vec![ast::Ident::with_quote('`', table)];
        if physical {
            name.insert(0, ast::Ident::new(PHYSICAL_SCHEMA));
        }
        let select = ast::Select {
            projection: exprs.into_iter().map(ast::SelectItem::UnnamedExpr).collect(),
            from: vec![ast::TableWithJoins {
                relation: table_factor(ast::ObjectName::from(name)),
                joins: vec![],
            }],
            ..empty_select()
        };
        let query = ast::Query {
            body: Box::new(ast::SetExpr::Select(Box::new(select))),
            ..empty_query()
        };
        let plan = self
            .sql_to_rel()
            .sql_statement_to_plan(ast::Statement::Query(Box::new(query)))
            .map_err(bind_error)?;
        let plan = Analyzer::new()
            .execute_and_check(plan, &self.options, |_, _| {})
            .map_err(bind_error)?;
        match plan {
            LogicalPlan::Projection(p) => Ok((p.expr, p.input.schema().clone())),
            other => Err(Error::Internal(format!("expected a projection, got {other}"))),
        }
    }

    fn optimize(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let plan = super::temporal::keep_as_of_columns(plan).map_err(bind_error)?;
        let analyzed = Analyzer::new()
            .execute_and_check(plan, &self.options, |_, _| {})
            .map_err(bind_error)?;
        let rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> = vec![
            Arc::new(datafusion_optimizer::simplify_expressions::SimplifyExpressions::new()),
            // IN / EXISTS into semi and anti joins, scalar subqueries into joins.
            Arc::new(
                datafusion_optimizer::decorrelate_predicate_subquery::DecorrelatePredicateSubquery::new(),
            ),
            Arc::new(datafusion_optimizer::scalar_subquery_to_join::ScalarSubqueryToJoin::new()),
            Arc::new(datafusion_optimizer::eliminate_filter::EliminateFilter::new()),
            Arc::new(datafusion_optimizer::push_down_filter::PushDownFilter::new()),
            Arc::new(datafusion_optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate::new()),
            Arc::new(datafusion_optimizer::simplify_expressions::SimplifyExpressions::new()),
            Arc::new(datafusion_optimizer::optimize_projections::OptimizeProjections::new()),
        ];
        let mut options = datafusion_common::config::ConfigOptions::default();
        options.optimizer.filter_null_join_keys = true;
        // Every scalar subquery becomes a join (a stream has no "execute
        // the subquery first").
        options.optimizer.enable_physical_uncorrelated_scalar_subquery = false;
        let context = OptimizerContext::new_with_config_options(Arc::new(options)).with_max_passes(3);
        Optimizer::with_rules(rules)
            .optimize(analyzed, &context, |_, _| {})
            .map_err(bind_error)
    }

    /// The table as the binder sees it: the columns a source reads (binding
    /// computed columns), the columns an `INSERT` writes, or all of them.
    fn table_source(&self, table: &Arc<CatalogTable>, read: bool, written: bool) -> Arc<dyn TableSource> {
        let physical_only = read || written;
        let base = if written {
            table.connector_table().write_schema()
        } else if read {
            table.connector_table().read_schema()
        } else {
            table.full_schema()
        };
        let fields: Vec<Field> = base
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(with_zone(f.data_type(), &self.zone))
            })
            .collect();
        Arc::new(CatalogTableSource {
            table: table.clone(),
            schema: Arc::new(arrow::datatypes::Schema::new(fields)),
            physical_only,
        })
    }
}

fn empty_select() -> ast::Select {
    ast::Select {
        select_token: ast::helpers::attached_token::AttachedToken::empty(),
        optimizer_hints: vec![],
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: false,
        projection: vec![],
        exclude: None,
        into: None,
        from: vec![],
        lateral_views: vec![],
        prewhere: None,
        selection: None,
        group_by: ast::GroupByExpr::Expressions(vec![], vec![]),
        cluster_by: vec![],
        distribute_by: vec![],
        sort_by: vec![],
        having: None,
        named_window: vec![],
        qualify: None,
        window_before_qualify: false,
        value_table_mode: None,
        connect_by: vec![],
        flavor: ast::SelectFlavor::Standard,
    }
}

fn empty_query() -> ast::Query {
    ast::Query {
        with: None,
        body: Box::new(ast::SetExpr::Values(ast::Values {
            explicit_row: false,
            value_keyword: false,
            rows: vec![],
        })),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: vec![],
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: vec![],
    }
}

/// A DataFusion planning error as ours, with the position of its diagnostic.
pub fn bind_error(e: DataFusionError) -> Error {
    let position = e.diagnostic().and_then(|d| d.span).and_then(|span| {
        (span.start.line > 0).then_some(Position {
            line: span.start.line,
            column: span.start.column,
        })
    });
    let message = e.find_root().to_string();
    let message = message
        .trim_start_matches("Error during planning: ")
        .trim_start_matches("Schema error: ")
        .to_string();
    Error::sql_at(message, position)
}

impl ContextProvider for Binder {
    fn get_table_source(&self, name: TableReference) -> DFResult<Arc<dyn TableSource>> {
        let (physical, table_name) = match &name {
            TableReference::Bare { table } => (false, table.to_string()),
            TableReference::Partial { schema, table } if schema.as_ref() == PHYSICAL_SCHEMA => {
                (true, table.to_string())
            }
            TableReference::Partial { schema, table } if schema.as_ref() == "default_database" => {
                (false, table.to_string())
            }
            TableReference::Full {
                catalog,
                schema,
                table,
            } if catalog.as_ref() == "default_catalog" && schema.as_ref() == "default_database" => {
                (false, table.to_string())
            }
            other => {
                return Err(DataFusionError::Plan(format!(
                    "Object '{other}' not found: only the default catalog and database exist"
                )));
            }
        };
        match self.catalog.table(&table_name) {
            Some(table) => {
                let written = !physical && self.insert_target.as_deref() == Some(table_name.as_str());
                Ok(self.table_source(table, physical, written))
            }
            None => {
                let hint = self
                    .catalog
                    .similar_name(&table_name)
                    .map(|n| format!(" (names are case-sensitive: did you mean '{n}'?)"))
                    .unwrap_or_default();
                Err(DataFusionError::Plan(format!(
                    "Object '{table_name}' not found{hint}"
                )))
            }
        }
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.expr_planners
    }

    fn get_relation_planners(&self) -> &[Arc<dyn RelationPlanner>] {
        &self.relation_planners
    }

    fn get_type_planner(&self) -> Option<Arc<dyn TypePlanner>> {
        Some(self.type_planner.clone())
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.functions.scalar(name)
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.functions.aggregate(name)
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.functions.window(name)
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.functions.scalar_names()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        vec![]
    }

    fn udaf_names(&self) -> Vec<String> {
        self.functions.aggregate_names()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.functions.window_names()
    }
}

/// `expr` (of struct type `from`) rebuilt with the field names of struct
/// type `to`, by position and recursively; `None` when nothing needs renaming.
fn struct_by_position(expr: &str, from: &DataType, to: &DataType) -> Option<String> {
    let (DataType::Struct(from), DataType::Struct(to)) = (from, to) else {
        return None;
    };
    if from.len() != to.len() {
        return None;
    }
    let quote = |name: &str| name.replace('\'', "''");
    let mut renamed = false;
    let pairs: Vec<String> = from
        .iter()
        .zip(to.iter())
        .map(|(f, t)| {
            let field = format!("{expr}['{}']", quote(f.name()));
            let value = match struct_by_position(&field, f.data_type(), t.data_type()) {
                Some(inner) => {
                    renamed = true;
                    inner
                }
                None => field,
            };
            renamed |= f.name() != t.name();
            format!("'{}', {value}", quote(t.name()))
        })
        .collect();
    renamed.then(|| format!("named_struct({})", pairs.join(", ")))
}
