"""Reports *render*: tables, exports, charts and HTML from stored results. No framework imports."""
