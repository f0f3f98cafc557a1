"""The data gpucap ships: GPU datasheets, model config.json files and cards, prices, links and
the published-error ranges. Read with importlib.resources (``gpucap.catalog.gpus.DATA_DIR``)."""
