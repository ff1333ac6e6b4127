def count(n):
    """Pure Python, through a local module of the project."""
    from labmods import vocabulary

    return vocabulary.sentence(n).count(" ") + 1
