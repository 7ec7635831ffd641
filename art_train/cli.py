def main() -> None:
    print("art 0.1.0")
