//! Grouped tables and group windows of the Table API: `Tumble`, `Slide`, `Session` and `Cumulate` over a time attribute (event or processing time), and their accessors.
//!
//! A window is grouped by its alias, with other keys or none:
//! `table.window(Tumble::over(size).on("ts").alias("w")).group_by([col("w"), col("k")])`.
//! It plans as the window table function of the same kind does in SQL
//! (`GROUP BY k, window_start, window_end` over `TUMBLE(TABLE t,
//! DESCRIPTOR(ts), size)`); [`window_start`], [`window_end`] and
//! [`window_time`] name its bounds in the select list.

use std::time::Duration;

use datafusion_common::Column;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_expr::logical_plan::Extension;
use datafusion_expr::{Expr, LogicalPlan};

use crate::table::Table;
use crate::table::expr::name_items;
use crate::{Error, Result};
use weir_common::types::{PROCTIME, TIME_ATTRIBUTE_KEY};
use weir_plan::window::{TvfWindow, WindowSpec};
use weir_sql::count_window::CountWindowNode;
use weir_sql::window_tvf::{WindowColumns, WindowTvfNode, time_attribute};

/// A table grouped by keys ([`Table::group_by`]).
#[derive(Debug, Clone)]
pub struct GroupedTable {
    table: Table,
    keys: Vec<Expr>,
}

impl GroupedTable {
    pub(super) fn new(table: Table, keys: Vec<Expr>) -> Self {
        GroupedTable { table, keys }
    }

    /// The keys and aggregates of each group (Flink's `select` on a grouped
    /// table): an updating result, as SQL's `GROUP BY` without a window.
    pub fn select(&self, exprs: impl IntoIterator<Item = Expr>) -> Result<Table> {
        let keys = self.table.prepare(self.keys.clone(), "group_by")?;
        let exprs = name_items(self.table.prepare(exprs, "select")?);
        (self.table).aggregate(self.table.plan.clone(), keys, exprs, "select")
    }
}

/// How long a window is, or how often it slides: a time interval, or a
/// count of rows ([`rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// A time interval (event or processing time).
    Time(Duration),
    /// A number of rows of a key (Flink's `rowInterval`).
    Rows(u64),
}

impl From<Duration> for Extent {
    fn from(d: Duration) -> Self {
        Extent::Time(d)
    }
}

/// `n` rows: a row-count window's size or slide (Flink's `rowInterval(n)`).
pub fn rows(n: u64) -> Extent {
    Extent::Rows(n)
}

/// The kind of a group window and its extents.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Tumble { size: Extent },
    Slide { size: Extent, slide: Option<Extent> },
    Session { gap: Duration },
    Cumulate { size: Duration, step: Option<Duration> },
}

/// A group window being described: kind and extents, then [`on`] a time
/// attribute and an [`alias`].
///
/// [`on`]: WindowBuilder::on
/// [`alias`]: WindowBuilder::alias
#[derive(Debug, Clone)]
pub struct WindowBuilder {
    kind: Kind,
    time: Option<String>,
}

/// A group window with its alias ([`Table::window`]).
#[derive(Debug, Clone)]
pub struct GroupWindow {
    kind: Kind,
    time: Option<String>,
    alias: String,
}

/// Tumbling windows (Flink's `Tumble`).
#[derive(Debug)]
pub struct Tumble;

impl Tumble {
    /// Windows of `size`: a time interval, or [`rows`].
    pub fn over(size: impl Into<Extent>) -> WindowBuilder {
        WindowBuilder {
            kind: Kind::Tumble { size: size.into() },
            time: None,
        }
    }
}

/// Sliding (hopping) windows (Flink's `Slide`).
#[derive(Debug)]
pub struct Slide;

impl Slide {
    /// Windows of `size`, one starting every [`WindowBuilder::every`].
    pub fn over(size: impl Into<Extent>) -> WindowBuilder {
        WindowBuilder {
            kind: Kind::Slide {
                size: size.into(),
                slide: None,
            },
            time: None,
        }
    }
}

/// Session windows (Flink's `Session`): a key's rows less than a gap apart.
#[derive(Debug)]
pub struct Session;

impl Session {
    /// Sessions closed by `gap` without rows.
    pub fn with_gap(gap: Duration) -> WindowBuilder {
        WindowBuilder {
            kind: Kind::Session { gap },
            time: None,
        }
    }
}

/// Cumulating windows (SQL's `CUMULATE`): from each multiple of `size`,
/// windows growing by a step up to `size`.
#[derive(Debug)]
pub struct Cumulate;

impl Cumulate {
    /// Windows up to `size`, growing by [`WindowBuilder::every`].
    pub fn over(size: Duration) -> WindowBuilder {
        WindowBuilder {
            kind: Kind::Cumulate { size, step: None },
            time: None,
        }
    }
}

impl WindowBuilder {
    /// A sliding window's slide, or a cumulating window's step.
    pub fn every(mut self, every: impl Into<Extent>) -> Self {
        let every = every.into();
        match &mut self.kind {
            Kind::Slide { slide, .. } => *slide = Some(every),
            Kind::Cumulate { step, .. } => {
                *step = match every {
                    Extent::Time(d) => Some(d),
                    Extent::Rows(_) => None,
                }
            }
            _ => {}
        }
        self
    }

    /// The time attribute the windows are over (a rowtime column with a
    /// watermark, or a `PROCTIME()` column).
    pub fn on(mut self, time: &str) -> Self {
        self.time = Some(time.to_string());
        self
    }

    /// Names the window, for [`WindowedTable::group_by`] and the accessors
    /// (Flink's `as`).
    pub fn alias(self, alias: &str) -> GroupWindow {
        GroupWindow {
            kind: self.kind,
            time: self.time,
            alias: alias.to_string(),
        }
    }
}

/// The start of window `alias` (Flink's `$("w").start()`; SQL's `window_start`).
pub fn window_start(alias: &str) -> Expr {
    Expr::Column(Column::new(Some(alias), "window_start"))
}

/// The end of window `alias` (Flink's `$("w").end()`; SQL's `window_end`).
pub fn window_end(alias: &str) -> Expr {
    Expr::Column(Column::new(Some(alias), "window_end"))
}

/// The time attribute of window `alias`, its end less 1 ms (Flink's
/// `$("w").rowtime()`; SQL's `window_time`).
pub fn window_time(alias: &str) -> Expr {
    Expr::Column(Column::new(Some(alias), "window_time"))
}

/// A table with a group window, to group by its alias ([`Table::window`]).
#[derive(Debug, Clone)]
pub struct WindowedTable {
    table: Table,
    window: GroupWindow,
}

impl WindowedTable {
    pub(super) fn new(table: Table, window: GroupWindow) -> Self {
        WindowedTable { table, window }
    }

    /// Groups by the window's alias and other keys (Flink's `groupBy`).
    pub fn group_by(&self, keys: impl IntoIterator<Item = Expr>) -> WindowGroupedTable {
        WindowGroupedTable {
            windowed: self.clone(),
            keys: keys.into_iter().collect(),
        }
    }
}

/// A windowed table grouped by its window and keys.
#[derive(Debug, Clone)]
pub struct WindowGroupedTable {
    windowed: WindowedTable,
    keys: Vec<Expr>,
}

/// Milliseconds of a window extent that must be a time interval.
fn millis(extent: Extent) -> Result<i64> {
    match extent {
        Extent::Time(d) => {
            i64::try_from(d.as_millis()).map_err(|_| Error::Plan(format!("window: {d:?} is too long")))
        }
        Extent::Rows(_) => Err(Error::Plan(
            "window: a time window's extents are time intervals; rows(n) makes a row-count window of \
             rows only"
                .into(),
        )),
    }
}

impl WindowGroupedTable {
    /// The keys, window bounds and aggregates of each window of each key
    /// (Flink's `select` on a window-grouped table): one row a window, when
    /// it fires.
    pub fn select(&self, exprs: impl IntoIterator<Item = Expr>) -> Result<Table> {
        let (table, window) = (&self.windowed.table, &self.windowed.window);
        let is_window =
            |e: &Expr| matches!(e, Expr::Column(c) if c.relation.is_none() && c.name == window.alias);
        if !self.keys.iter().any(is_window) {
            return Err(Error::Plan(format!(
                "group_by: a windowed table is grouped by its window's alias '{}' (and other keys)",
                window.alias
            )));
        }
        let keys = table.prepare(self.keys.iter().filter(|k| !is_window(k)).cloned(), "group_by")?;
        if let Some((size, slide)) = window.rows()? {
            return self.count_windows(keys, size, slide, exprs.into_iter().collect());
        }
        let plan = self.window_plan(&keys)?;
        let windowed = Table::new(table.engine.clone(), plan.clone());
        let exprs = (exprs.into_iter())
            .map(|e| with_window_columns(e, &window.alias))
            .collect::<Result<Vec<_>>>()?;
        let exprs = name_items(windowed.prepare(exprs, "select")?);
        let bounds = [WindowColumns::standard().start, WindowColumns::standard().end];
        let keys = keys
            .into_iter()
            .chain(bounds.map(|b| Expr::Column(Column::from_name(b))))
            .collect();
        windowed.aggregate(plan, keys, exprs, "select")
    }

    /// Row-count windows of `size` rows every `slide`: an aggregation of
    /// `exprs` per key over a [`CountWindowNode`]; they have no bounds to
    /// select.
    fn count_windows(&self, keys: Vec<Expr>, size: u64, slide: u64, exprs: Vec<Expr>) -> Result<Table> {
        let (table, window) = (&self.windowed.table, &self.windowed.window);
        let time = self.time_attribute()?;
        let (_, field) = (table.plan.schema().qualified_field_from_column(&time))
            .map_err(|e| super::failed("window", e))?;
        if field.metadata().get(TIME_ATTRIBUTE_KEY).map(String::as_str) != Some(PROCTIME) {
            return Err(Error::Plan(format!(
                "window: row-count windows are on processing time: '{}' is an event-time attribute; \
                 use a PROCTIME() column",
                time.name
            )));
        }
        for e in &exprs {
            let bounds = e
                .column_refs()
                .into_iter()
                .find(|c| c.relation.as_ref().is_some_and(|r| r.table() == window.alias));
            if let Some(c) = bounds {
                return Err(Error::Plan(format!(
                    "select: a row-count window has no {}: its rows are counted, not timed",
                    c.name
                )));
            }
        }
        let node = CountWindowNode::try_new(table.plan.clone(), size, slide, time)
            .map_err(|e| super::failed("window", e))?;
        let plan = LogicalPlan::Extension(Extension {
            node: std::sync::Arc::new(node),
        });
        let exprs = name_items(table.prepare(exprs, "select")?);
        table.aggregate(plan, keys, exprs, "select")
    }

    /// The time attribute the window is on (an error when it names none).
    fn time_attribute(&self) -> Result<Column> {
        let (table, window) = (&self.windowed.table, &self.windowed.window);
        let Some(time) = &window.time else {
            return Err(Error::Plan(format!(
                "window: window '{}' is on no time attribute; say which with .on(\"ts\")",
                window.alias
            )));
        };
        time_attribute(&table.plan, time).map_err(|e| super::failed("window", e))
    }

    /// The window table function's plan over the table (sessions kept per
    /// grouping key: `keys` must be columns then).
    fn window_plan(&self, keys: &[Expr]) -> Result<LogicalPlan> {
        let (table, window) = (&self.windowed.table, &self.windowed.window);
        let time_column = self.time_attribute()?;
        let (window_kind, partition_by) = match &window.kind {
            Kind::Tumble { size } => (TvfWindow::Sliced(tumble(*size)?), None),
            Kind::Slide { size, slide } => {
                let slide = slide.ok_or_else(|| {
                    Error::Plan(
                        "window: a Slide window needs its slide: Slide::over(size).every(slide)".into(),
                    )
                })?;
                let spec = WindowSpec::hop(millis(slide)?, millis(*size)?, 0);
                (
                    TvfWindow::Sliced(spec.map_err(|e| Error::Plan(format!("window: {e}")))?),
                    None,
                )
            }
            Kind::Cumulate { size, step } => {
                let step = step.ok_or_else(|| {
                    Error::Plan(
                        "window: a Cumulate window needs its step: Cumulate::over(size).every(step)".into(),
                    )
                })?;
                let spec = WindowSpec::cumulate(millis(step.into())?, millis((*size).into())?, 0);
                (
                    TvfWindow::Sliced(spec.map_err(|e| Error::Plan(format!("window: {e}")))?),
                    None,
                )
            }
            Kind::Session { gap } => {
                let gap = millis((*gap).into())?;
                if gap <= 0 {
                    return Err(Error::Plan("window: a session's gap must be positive".into()));
                }
                (TvfWindow::Session { gap }, Some(session_keys(keys)?))
            }
        };
        let node = WindowTvfNode::try_new(
            table.plan.clone(),
            time_column,
            window_kind,
            partition_by,
            WindowColumns::standard(),
        )
        .map_err(|e| super::failed("window", e))?;
        Ok(LogicalPlan::Extension(Extension {
            node: std::sync::Arc::new(node),
        }))
    }
}

/// Tumbling windows of `size`.
fn tumble(size: Extent) -> Result<WindowSpec> {
    WindowSpec::tumble(millis(size)?, 0).map_err(|e| Error::Plan(format!("window: {e}")))
}

impl GroupWindow {
    /// A row-count window's size and slide (`None`: a time window); an
    /// error when a window mixes rows and time.
    fn rows(&self) -> Result<Option<(u64, u64)>> {
        let mixed = || Error::Plan("window: a window's size and slide are both rows or both time".into());
        match &self.kind {
            Kind::Tumble {
                size: Extent::Rows(n),
            } => Ok(Some((*n, *n))),
            Kind::Slide {
                size: Extent::Rows(n),
                slide,
            } => match slide {
                Some(Extent::Rows(m)) => Ok(Some((*n, *m))),
                Some(Extent::Time(_)) => Err(mixed()),
                None => Err(Error::Plan(
                    "window: a Slide window needs its slide: Slide::over(size).every(slide)".into(),
                )),
            },
            Kind::Slide {
                slide: Some(Extent::Rows(_)),
                ..
            } => Err(mixed()),
            _ => Ok(None),
        }
    }
}

/// The columns a session window's sessions are kept per: its other
/// grouping keys, which must be columns.
fn session_keys(keys: &[Expr]) -> Result<Vec<Column>> {
    (keys.iter())
        .map(|k| match k {
            Expr::Column(c) => Ok(c.clone()),
            other => Err(Error::Plan(format!(
                "group_by: a session window's other keys are columns, not {other}; add it as a column first"
            ))),
        })
        .collect()
}

/// `expr` with the window accessors of window `alias` as the window's
/// columns (an accessor of another window is an error).
fn with_window_columns(expr: Expr, alias: &str) -> Result<Expr> {
    let standard = WindowColumns::standard();
    let names = [standard.start, standard.end, standard.time];
    let rewritten = expr.transform_up(|e| match e {
        Expr::Column(c) if names.contains(&c.name) && c.relation.is_some() => {
            let relation = c
                .relation
                .as_ref()
                .map(|r| r.table().to_string())
                .unwrap_or_default();
            if relation != alias {
                return datafusion_common::plan_err!(
                    "select: '{}' names window '{relation}', but the table's window is '{alias}'",
                    c.name
                );
            }
            Ok(Transformed::yes(Expr::Column(Column::from_name(c.name))))
        }
        other => Ok(Transformed::no(other)),
    });
    Ok(rewritten.map_err(|e| super::failed("select", e))?.data)
}
