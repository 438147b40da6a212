"""sparkgate: deploy SGLang + Ling-3.0-flash on a DGX Spark and admit traffic only once each requested
optimization is proven engaged."""

__version__ = "0.1.0"
