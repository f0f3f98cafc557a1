"""What gpucap knows before any question: GPU datasheets, model architectures read from their config.json files, and prices. Reads data; no physics."""
