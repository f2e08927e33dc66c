//! Parquet files of a run directory (timeseries.parquet, latency_hist.parquet), written here so
//! that `tiersim run` need not import polars (0.13 s of every run's start-up) only to write them.
//! Every column OPTIONAL (nullable, like polars' columns), strings as BYTE_ARRAY annotated
//! String, one row group, zstd pages, no statistics (as the polars writer was called). polars
//! reads the files back as the same frames (tests/test_run_files.py); the bytes differ from what
//! polars wrote (no arrow schema in the metadata, parquet-rs's encodings) and are the same on
//! every run.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, LogicalType, Repetition, Type as PhysicalType, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, DataType, DoubleType, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::types::Type;

/// One column's values; `None` is a null.
pub enum Values {
    I64(Vec<Option<i64>>),
    F64(Vec<Option<f64>>),
    Str(Vec<Option<String>>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::I64(v) => v.len(),
            Values::F64(v) => v.len(),
            Values::Str(v) => v.len(),
        }
    }
}

pub struct Column {
    pub name: String,
    pub values: Values,
}

pub enum WriteError {
    /// Creating or writing the file failed (kept whole, so the caller can report its errno).
    Io(io::Error),
    Invalid(String),
}

impl From<ParquetError> for WriteError {
    fn from(e: ParquetError) -> Self {
        match e {
            ParquetError::External(inner) => match inner.downcast::<io::Error>() {
                Ok(io) => WriteError::Io(*io),
                Err(other) => WriteError::Invalid(other.to_string()),
            },
            other => WriteError::Invalid(other.to_string()),
        }
    }
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

fn field(column: &Column) -> Result<Arc<Type>, WriteError> {
    let (physical, logical) = match column.values {
        Values::I64(_) => (PhysicalType::INT64, None),
        Values::F64(_) => (PhysicalType::DOUBLE, None),
        Values::Str(_) => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
    };
    Ok(Arc::new(
        Type::primitive_type_builder(&column.name, physical)
            .with_repetition(Repetition::OPTIONAL)
            .with_logical_type(logical)
            .build()?,
    ))
}

/// Definition levels of an OPTIONAL column (1 present, 0 null) and its present values.
fn split<T: Clone, U>(values: &[Option<T>], convert: impl Fn(T) -> U) -> (Vec<i16>, Vec<U>) {
    let levels = values.iter().map(|v| i16::from(v.is_some())).collect();
    let present = values.iter().flatten().cloned().map(convert).collect();
    (levels, present)
}

fn write_values<T: DataType>(
    writer: &mut SerializedColumnWriter<'_>,
    levels: &[i16],
    values: &[T::T],
) -> Result<(), WriteError> {
    writer.typed::<T>().write_batch(values, Some(levels), None)?;
    Ok(())
}

/// Write `columns` (all of one length) to `path` as one Parquet file.
pub fn write(path: &Path, columns: &[Column]) -> Result<(), WriteError> {
    let rows = columns.first().map_or(0, |c| c.values.len());
    if let Some(c) = columns.iter().find(|c| c.values.len() != rows) {
        return Err(WriteError::Invalid(format!(
            "column '{}' has {} values, the first column {rows}",
            c.name,
            c.values.len()
        )));
    }
    let fields = columns.iter().map(field).collect::<Result<Vec<_>, _>>()?;
    let schema = Arc::new(Type::group_type_builder("schema").with_fields(fields).build()?);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::None)
        .build();
    let mut writer = SerializedFileWriter::new(File::create(path)?, schema, Arc::new(props))?;
    // An empty frame: the schema and no row group; polars reads it back as the empty frame.
    if rows > 0 {
        let mut group = writer.next_row_group()?;
        for column in columns {
            let mut out =
                group.next_column()?.ok_or_else(|| WriteError::Invalid("fewer columns than the schema".into()))?;
            match &column.values {
                Values::I64(v) => {
                    let (levels, present) = split(v, |x| x);
                    write_values::<Int64Type>(&mut out, &levels, &present)?;
                }
                Values::F64(v) => {
                    let (levels, present) = split(v, |x| x);
                    write_values::<DoubleType>(&mut out, &levels, &present)?;
                }
                Values::Str(v) => {
                    let (levels, present) = split(v, |s: String| ByteArray::from(s.into_bytes()));
                    write_values::<ByteArrayType>(&mut out, &levels, &present)?;
                }
            }
            out.close()?;
        }
        group.close()?;
    }
    writer.close()?;
    Ok(())
}
