package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Word lists of the stories.
var (
	storyPlaces    = []string{"a small village", "a busy town", "a quiet farm", "a house by the river", "a city near the sea", "a cabin in the woods", "a street of old shops", "a school on a hill"}
	storyJobs      = []string{"baker", "teacher", "farmer", "painter", "doctor", "fisher", "builder", "gardener", "cook", "writer"}
	storyLikes     = []string{"reading books", "walking in the park", "playing music", "cooking soup", "drawing birds", "fixing old clocks", "growing tomatoes", "watching the stars"}
	storyThings    = []string{"a red kite", "an old map", "a blue box", "a lost dog", "a broken bike", "a letter", "a golden key", "a tiny bird"}
	storyWeather   = []string{"It was a sunny morning.", "Rain fell all day.", "The wind was cold.", "Snow covered the roads.", "The sky was grey and still.", "It was a warm evening."}
	storyFeelings  = []string{"happy", "surprised", "worried", "curious", "tired", "proud", "calm", "excited"}
	storyEndings   = []string{"From that day on, %s smiled every time %s walked past.", "%s never forgot that day.", "That night %s slept well, and %s dreamed of the sea.", "%s told the story to everyone in town.", "In the end, %s was glad to be home."}
	storyConnector = []string{"Then", "After a while", "Later", "Soon", "Before long", "At noon"}
)

// stories writes n short stories in plain English from seed: a person, a
// place, an event and its outcome, in 6-10 sentences. They are the plain
// text of the training mix, so that the teacher learns some language
// besides the tasks' drills; their vocabulary is small and their grammar
// simple, which is what a teacher of a few million parameters can learn.
func stories(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 0x73746f7279)) // "story"
	out := make([]string, n)
	for i := range out {
		out[i] = story(r)
	}
	return out
}

func story(r *rand.Rand) string {
	pick := func(l []string) string { return l[r.IntN(len(l))] }
	p := wordPeople[r.IntN(len(wordPeople))]
	name, pron := p.name, strings.ToLower(p.pron)
	poss := "his"
	if pron == "she" {
		poss = "her"
	}
	friend := wordPeople[r.IntN(len(wordPeople))]
	for friend.name == name {
		friend = wordPeople[r.IntN(len(wordPeople))]
	}
	thing := pick(storyThings)
	s := []string{
		fmt.Sprintf("%s lived in %s.", name, pick(storyPlaces)),
		fmt.Sprintf("%s was a %s, and %s liked %s.", p.pron, pick(storyJobs), pron, pick(storyLikes)),
		pick(storyWeather),
		fmt.Sprintf("One day %s found %s near %s door.", name, thing, poss),
		fmt.Sprintf("%s felt %s.", p.pron, pick(storyFeelings)),
	}
	for range 1 + r.IntN(3) {
		switch r.IntN(4) {
		case 0:
			s = append(s, fmt.Sprintf("%s %s went to see %s, who was a %s.", pick(storyConnector), name, friend.name, pick(storyJobs)))
		case 1:
			s = append(s, fmt.Sprintf("%s, %s showed %s to %s.", pick(storyConnector), pron, thing, friend.name))
		case 2:
			s = append(s, fmt.Sprintf("%s asked, \"Where did %s come from?\"", friend.name, thing))
		default:
			s = append(s, fmt.Sprintf("%s %s and %s spent the afternoon %s.", pick(storyConnector), name, friend.name, pick(storyLikes)))
		}
	}
	end := pick(storyEndings)
	switch strings.Count(end, "%s") {
	case 1:
		end = fmt.Sprintf(end, name)
	default:
		end = fmt.Sprintf(end, name, pron)
	}
	s = append(s, end)
	return strings.Join(s, " ")
}
