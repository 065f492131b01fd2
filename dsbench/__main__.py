"""``python -m dsbench`` runs the CLI."""

from dsbench.cli import main

if __name__ == "__main__":
    main()
