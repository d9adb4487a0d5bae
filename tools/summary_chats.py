"""The fixed long chats ``tools/summary_rate.py`` measures summaries on (issue 27, item 2).

Conversations of the kinds people have with a small local model, user and assistant turns
both written out (so every run summarises the same text, whatever the model would have
replied): notes to remember, planning a trip, debugging code, a recipe, a story.
"""

from __future__ import annotations

TOPICS = ("lanterns", "harbours", "gulls", "nets", "tides", "boats", "ropes", "maps")

NOTES = [
    turn
    for i, topic in enumerate(TOPICS)
    for turn in (
        f"Note {i}: please keep in mind that the {topic} of the northern coast were counted "
        "twice this year, once in spring and once in late autumn, by two teams.",
        f"Noted: the {topic} of the northern coast were counted twice this year, in spring and "
        "in late autumn, by two different teams. I will keep that in mind.",
    )
]

TRIP = [
    "I want to plan a four-day trip to Lisbon in May with my sister. We like food, old "
    "neighbourhoods and we do not want to rent a car.",
    "Lisbon suits that well. Stay in Baixa or Chiado so you can walk to most places, use the "
    "trams and the metro, and keep one day for a train trip to Sintra.",
    "Our budget is about 900 euros each, flights already paid. Which neighbourhood is cheaper, "
    "Alfama or Baixa?",
    "Alfama is usually a little cheaper and more charming, but it is hilly and the streets are "
    "steep. Baixa is flatter and central. With 900 euros each you can afford either.",
    "Let's take Alfama then. What should we eat on the first evening?",
    "Try a small tasca in Alfama: grilled sardines, bacalhau à brás and a glass of vinho verde. "
    "Many places have fado in the evening; book ahead on weekends.",
    "My sister is vegetarian, I forgot to say. Does that change things?",
    "A bit: sardines and bacalhau are out. Look for the vegetarian places in Príncipe "
    "Real, and ask for açorda or caldo verde without chouriço.",
    "On day two we want the Belém tower and the monastery. How do we get there from Alfama?",
    "Take tram 15 from Praça da Figueira or Cais do Sodré to Belém, about 30 minutes. Go early, "
    "buy the monastery ticket online, and try the pastéis de Belém next door.",
    "Day three is Sintra. Is one day enough for Pena palace and Quinta da Regaleira?",
    "Yes if you start early: the 8:40 train from Rossio, Pena first before the crowds, then walk "
    "down to Quinta da Regaleira. Take comfortable shoes; it is all uphill.",
    "And the last day we fly at 18:00. What can we do in the morning?",
    "Stay close: the São Jorge castle opens at 9:00 and is in Alfama, then lunch nearby and the "
    "metro to the airport by 15:30. Keep your bags at the hotel until then.",
]

CODE = [
    "My Python script reads a CSV of 40,000 orders and sums the amount per customer, but it "
    "takes almost a minute. I use a for loop over rows and a dict.",
    "A minute is slow for 40,000 rows. Most likely something inside the loop is expensive. "
    "Could you show the loop? Reading the file and summing into a dict should take well under a "
    "second.",
    "Here it is: for row in rows: totals[row['customer']] = totals.get(row['customer'], 0) + "
    "float(row['amount']); save(totals). The save writes the dict to a JSON file.",
    "There it is: save(totals) runs on every row, so you write the JSON file 40,000 times. Move "
    "save(totals) after the loop and it should run in a fraction of a second.",
    "That fixed it, 0.4 seconds now. But some amounts are like '1.234,50' and float() fails.",
    "Those use a comma as decimal separator and a dot for thousands. Replace the dots with "
    "nothing and the comma with a dot before float(), or use the locale module or Decimal.",
    "I used replace and it works. Can I also get the top 10 customers by total?",
    "Yes: sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:10], or "
    "heapq.nlargest(10, totals.items(), key=lambda kv: kv[1]) which does not sort everything.",
    "Last thing: the output should be a CSV with customer, total and rank.",
    "Use csv.writer: write the header row, then enumerate the top ten starting at 1 and write "
    "customer, a total formatted with two decimals, and the rank for each.",
    "Can the rank handle ties, two customers with the same total?",
    "Give equal totals the same rank: keep the previous total and rank, and only set rank to "
    "the position when the total differs from the previous one (competition ranking, 1, 2, 2, 4).",
]

RECIPE = [
    "I have chickpeas, spinach, two onions, garlic, a tin of tomatoes and some cumin. What can I "
    "cook for four people tonight?",
    "A chickpea and spinach stew: soften the onions and garlic in oil, add cumin, then the "
    "tomatoes and chickpeas, simmer twenty minutes and stir in the spinach at the end.",
    "I only have dried chickpeas, not tinned. Is that a problem?",
    "Dried chickpeas need soaking for eight hours and about an hour of boiling, so for tonight "
    "use a pressure cooker (25 minutes after soaking for an hour in hot water) or cook rice instead.",
    "I have a pressure cooker. How much dried chickpeas for four people?",
    "About 250 grams dried gives roughly 600 grams cooked, enough for four. Add a teaspoon of salt "
    "only after cooking so the skins stay tender.",
    "One of the guests cannot eat onions. What can replace them?",
    "Use fennel or celery for sweetness and body, or leave them out and add a little more cumin "
    "and a pinch of asafoetida, which gives an onion-like taste.",
    "Good, celery then. Should I serve it with rice or bread?",
    "Both work: basmati rice makes it a full meal, flatbread or crusty bread is better for "
    "dipping. A spoon of yoghurt with lemon on top balances the spices.",
    "How long does the whole thing take with the pressure cooker?",
    "About an hour and a half: an hour soaking in hot water, 25 minutes under pressure while you "
    "prepare the rest, then 30 minutes for the stew itself.",
]

STORY = [
    "Let's write a short story together. The main character is Mira, a lighthouse keeper on a "
    "small island who has not seen a ship for three weeks.",
    "Mira climbed the hundred and twelve steps at dusk as always, wiped the great lens and lit "
    "the lamp, and stared at an empty sea for the twenty-first evening in a row.",
    "One night she sees a green light far out at sea, blinking in a pattern.",
    "Three short, three long, three short. Mira counted twice to be sure, then reached for the "
    "old signal book her grandfather had left in the drawer under the radio.",
    "The radio has been broken since the storm, so she cannot call the mainland.",
    "She had tried to fix it every morning since the storm, but the salt had eaten the wires. "
    "The only answer she could give was the lighthouse itself.",
    "She decides to answer with the lighthouse lamp, covering and uncovering it.",
    "With a tarpaulin and a broom handle she flashed back: received, where are you. The green "
    "light stopped, then blinked again, slower now, as if someone was spelling a word.",
    "The word is her brother's name, Tomas, who left the island ten years ago.",
    "Mira's hands shook. Tomas had left after their father's funeral, angry, in the fishing boat "
    "they had built together, and no letter had ever come back.",
    "At dawn a small boat comes into the bay with a man waving.",
    "It was the same boat, repainted blue, and the man at the oars was older and thinner, but he "
    "waved the way Tomas always had, with his whole arm, as if the sea could not hear him.",
]

# Long chats change subject, as people's do: each is two of the above, one after the other,
# so a 512-token context is cut two or three times (the second cut summarises the first
# summary with the turns that leave).
CHATS = {
    "notes+recipe": NOTES + RECIPE,
    "trip+story": TRIP + STORY,
    "code+notes": CODE + NOTES,
    "story+code": STORY + CODE,
    "recipe+trip": RECIPE + TRIP,
}
