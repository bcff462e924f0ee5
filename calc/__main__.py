from calc.cli import main

# Guarded: the engine's workers start as fresh interpreters that import this module by name (spawn).
if __name__ == "__main__":
    raise SystemExit(main())
