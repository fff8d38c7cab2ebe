"""Trains 'fine' but the loss goes NaN; nothing raises."""

for step in range(3):
    print(f"step {step} loss {'nan' if step == 2 else 0.5}")
