"""gpuetl: declarative ETL for AI training data, on cuDF/CuPy/KvikIO or pandas/pyarrow/numpy."""

__version__ = "0.1.0"
