WORDS = ("alpha", "beta", "gamma")


def sentence(n):
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))
